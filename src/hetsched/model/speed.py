"""Speeds: how fast a job runs on each device model, and how much work it has.

A job's **rate** on a device model is its throughput there, for the whole job (all of its
tasks together): training steps per second, or any relative unit (``A100: 3.1, V100: 1``).
Its **work** is in the same unit times seconds (steps), so ``work / rate`` is the time the
job needs on that model. Everything here is pure: the drivers, the core and the round-based
policies ask the same two questions of it, "speed of job J on model M" and "remaining work
-> time on M".

Where the numbers come from, first match wins:

1. the job's own ``speed`` map (``JobSpeed.rates``);
2. the profile's throughput table (:class:`SpeedTable`) for the job's ``job_type`` at the
   job's device count (Gavel's table lists throughputs per (job type, GPUs));
3. nothing: every model is equal (rate 1 everywhere) and the work is the job's duration
   in seconds, which is how hetsched treated every job before speeds existed.

Model names match case-insensitively (Gavel's table says ``v100``, clusters ``V100``).
A model a job does not list runs at the job's ``*`` rate when it gives one, else at its
slowest listed positive rate (a conservative guess: a job is never assumed faster than measured).
A rate of 0 means the job cannot make progress on that model.

Work is given in steps (``work: 1.2e6``), or as a duration on a named model
(``work: 2h@V100``: the job needs two hours on a V100, so ``2h x rate(V100)`` steps).
Without work, a job's duration (when the driver knows one, as the simulator does) is its
run time on its fastest model.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

__all__ = [
    "DEFAULT_KEY",
    "NO_SPEED",
    "JobSpeed",
    "SpeedError",
    "SpeedSubject",
    "SpeedTable",
    "Speeds",
    "job_devices",
    "resolve",
    "speed_of",
    "time_on",
]

#: the key of a speed map that gives the rate on every model it does not list
DEFAULT_KEY = "*"


class SpeedError(ValueError):
    """Speed information that cannot be resolved (an unknown job type, work in steps
    without any rate, a duration on a model the job has no rate for)."""


class _Choice(Protocol):
    @property
    def count(self) -> int: ...


class _Request(Protocol):
    @property
    def primary(self) -> _Choice: ...


class _Resources(Protocol):
    @property
    def devices(self) -> Sequence[_Request]: ...


class SpeedSubject(Protocol):
    """What a job's speed is resolved from; a :class:`~hetsched.model.job.Job` is one.
    A job holds its :class:`JobSpeed`, so this module names no job class (the dependency
    goes one way: job -> speed)."""

    @property
    def id(self) -> str: ...

    @property
    def replicas(self) -> int: ...

    @property
    def resources(self) -> _Resources: ...

    @property
    def speed(self) -> JobSpeed: ...


def _fold(model: str) -> str:
    return model.strip().casefold()


def _frozen(rates: Mapping[str, float]) -> Mapping[str, float]:
    return rates if isinstance(rates, MappingProxyType) else MappingProxyType(dict(rates))


@dataclass(frozen=True, slots=True)
class JobSpeed:
    """What a job says about its speed; every field is optional.

    ``rates``: device model (or ``*``) -> rate of the whole job there. ``job_type``: looked
    up in the profile's table when ``rates`` is empty. ``work``: total work in steps, or
    ``work_s`` seconds on model ``work_model``.
    """

    rates: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    job_type: str | None = None
    work: float | None = None
    work_s: float | None = None
    work_model: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rates", _frozen(self.rates))
        for model, rate in self.rates.items():
            if not math.isfinite(rate) or rate < 0:
                raise SpeedError(f"rate on {model!r} must be finite and >= 0, got {rate}")
        if self.work is not None and (not math.isfinite(self.work) or self.work <= 0):
            raise SpeedError(f"work must be finite and > 0, got {self.work}")
        if self.work is not None and self.work_s is not None:
            raise SpeedError("work is given either in steps or as a duration, not both")
        if self.work_s is not None and (not math.isfinite(self.work_s) or self.work_s <= 0):
            raise SpeedError(f"work duration must be finite and > 0, got {self.work_s}")
        if self.work_model is not None and self.work_s is None:
            raise SpeedError("work_model names the model of a work duration, which is missing")
        specific = any(m != DEFAULT_KEY for m in self.rates) or self.job_type is not None
        if self.work is not None and not specific:
            raise SpeedError("work in steps needs a speed map or a job type")
        if self.work_s is not None and self.work_model is None and specific:
            raise SpeedError(
                f"a work duration needs the model it was measured on (e.g. {self.work_s:g}s@V100)"
            )

    @property
    def known(self) -> bool:
        """True when the job says anything about speed (rates, a job type or work)."""
        return bool(self.rates) or self.job_type is not None or self.given_work

    @property
    def given_work(self) -> bool:
        return self.work is not None or self.work_s is not None

    def describe_work(self) -> str:
        """``1200000`` or ``7200s@V100``: the notation specs and workloads read back."""
        if self.work is not None:
            return repr(self.work) if not self.work.is_integer() else str(int(self.work))
        if self.work_s is not None:
            seconds = f"{self.work_s:.6f}".rstrip("0").rstrip(".")
            return f"{seconds}s" + (f"@{self.work_model}" if self.work_model else "")
        return ""


def _rate_lookup(
    rows: Mapping[tuple[str, int], Mapping[str, float]], job_type: str, devices: int
) -> Mapping[str, float] | None:
    """The listed rates, or linear scaling from the largest listed size below ``devices``."""
    exact = rows.get((job_type, devices))
    if exact is not None:
        return exact
    sizes = [n for (t, n) in rows if t == job_type and n < devices]
    if not sizes:
        return None
    base = max(sizes)
    factor = devices / base
    return MappingProxyType({m: r * factor for m, r in rows[(job_type, base)].items()})


@dataclass(frozen=True, slots=True)
class SpeedTable:
    """Rates per (job type, devices of the job) and device model: a profile's throughput
    table. Device models are stored case-folded."""

    rows: Mapping[tuple[str, int], Mapping[str, float]] = field(
        default_factory=lambda: MappingProxyType({})
    )

    def __post_init__(self) -> None:
        rows: dict[tuple[str, int], Mapping[str, float]] = {}
        for (job_type, devices), rates in self.rows.items():
            if devices < 1:
                raise SpeedError(f"job type {job_type!r}: devices must be >= 1, got {devices}")
            folded = {_fold(m): float(r) for m, r in rates.items()}
            bad = [m for m, r in folded.items() if not math.isfinite(r) or r < 0]
            if bad:
                raise SpeedError(f"job type {job_type!r}: bad rate on {', '.join(bad)}")
            rows[(job_type, int(devices))] = MappingProxyType(folded)
        object.__setattr__(self, "rows", MappingProxyType(rows))

    @classmethod
    def of(cls, types: Mapping[str, Mapping[str, float]]) -> SpeedTable:
        """A table from ``{job type: {model: rate}}`` (rates of the 1-device job; larger
        jobs scale linearly)."""
        return cls({(t, 1): r for t, r in types.items()})

    @classmethod
    def from_gavel(
        cls, raw: Mapping[str, Any], models: Mapping[str, str] | None = None
    ) -> SpeedTable:
        """Gavel's ``simulation_throughputs.json`` (parsed): worker type -> ``"('<job
        type>', <GPUs>)"`` -> ``{"null": isolated steps/s, ...}``. The ``*_unconsolidated``
        worker types are skipped (Gavel's simulator uses the consolidated ones), and so are
        entries without a positive isolated rate. ``models`` renames worker types to device
        models (default: the worker type itself, matched case-insensitively)."""
        rename = {_fold(k): v for k, v in (models or {}).items()}
        rows: dict[tuple[str, int], dict[str, float]] = {}
        for worker, table in raw.items():
            if str(worker).endswith("_unconsolidated") or not isinstance(table, Mapping):
                continue
            model = rename.get(_fold(str(worker)), str(worker))
            for key, value in table.items():
                try:
                    job_type, devices = ast.literal_eval(key)
                except (ValueError, SyntaxError, TypeError):
                    raise SpeedError(
                        f"{worker}: key {key!r} is not ('<job type>', <GPUs>)"
                    ) from None
                alone = value.get("null") if isinstance(value, Mapping) else None
                # a listed 0 is kept: the type cannot run there (it is not "unlisted")
                if isinstance(alone, int | float) and not isinstance(alone, bool) and alone >= 0:
                    rows.setdefault((str(job_type), int(devices)), {})[model] = float(alone)
        return cls({k: MappingProxyType(v) for k, v in rows.items()})

    def merged(self, other: SpeedTable) -> SpeedTable:
        """This table with ``other``'s rows on top (a profile's inline types over a file)."""
        return SpeedTable({**self.rows, **other.rows})

    def rates(self, job_type: str, devices: int = 1) -> Mapping[str, float] | None:
        """Rates of ``job_type`` at ``devices`` (scaled from a smaller listed size when the
        size itself is not listed); None for an unknown type."""
        return _rate_lookup(self.rows, job_type, max(devices, 1))

    def job_types(self) -> list[str]:
        return sorted({t for t, _ in self.rows})

    def models(self) -> list[str]:
        return sorted({m for rates in self.rows.values() for m in rates})

    def __len__(self) -> int:
        return len(self.rows)


@dataclass(frozen=True, slots=True)
class Speeds:
    """One job's resolved speed: the answer to "how fast on model M" and "how long for
    this much work on M". ``rates`` keys are case-folded models; empty means every model
    runs at ``default`` (1.0 for a job without speed information)."""

    rates: Mapping[str, float]
    default: float
    work: float

    @property
    def uniform(self) -> bool:
        """True when every model runs the job at the same rate."""
        return all(r == self.default for r in self.rates.values())

    def on(self, model: str) -> float:
        """The job's rate on ``model`` (0: it makes no progress there)."""
        return self.rates.get(_fold(model), self.default)

    def time_on(self, model: str, remaining: float | None = None) -> float:
        """Seconds to do ``remaining`` work (default: all of it) on ``model``; inf where
        the rate is 0."""
        work = self.work if remaining is None else remaining
        rate = self.on(model)
        if work <= 0:
            return 0.0
        return math.inf if rate <= 0 else work / rate

    def relative(self, model: str, reference: str) -> float:
        """How many times faster the job runs on ``model`` than on ``reference`` (1.0 when
        both are 0)."""
        base = self.on(reference)
        rate = self.on(model)
        if base <= 0:
            return 1.0 if rate <= 0 else math.inf
        return rate / base

    def fastest(self, models: Iterable[str]) -> str | None:
        """Of ``models``, the one the job runs fastest on (the first on ties; None when the
        job makes no progress on any)."""
        best: str | None = None
        best_rate = 0.0
        for model in models:
            rate = self.on(model)
            if rate > best_rate:
                best, best_rate = model, rate
        return best


#: the speed of a job that says nothing about it, shared (it is immutable): most jobs say
#: nothing, and a simulator or a benchmark builds a job per task
NO_SPEED = JobSpeed()


def job_devices(job: SpeedSubject) -> int:
    """Devices the whole job takes (replicas x the count of its first device request;
    at least 1): the size a throughput table is looked up at."""
    request = job.resources
    count = request.devices[0].primary.count if request.devices else 1
    return max(1, int(count) * int(job.replicas))


def _rates_of(job: SpeedSubject, speed: JobSpeed, table: SpeedTable | None) -> dict[str, float]:
    if speed.rates:
        return {_fold(m): r for m, r in speed.rates.items()}
    if speed.job_type is None:
        return {}
    if table is None:
        raise SpeedError(
            f"job {job.id}: job type {speed.job_type!r} needs the profile's throughput table "
            "(speeds.table or speeds.job_types)"
        )
    rates = table.rates(speed.job_type, job_devices(job))
    if rates is None:
        known = ", ".join(table.job_types()[:8])
        more = ", ..." if len(table.job_types()) > 8 else ""
        raise SpeedError(
            f"job {job.id}: unknown job type {speed.job_type!r} (known: {known}{more})"
        )
    return dict(rates)


def resolve(
    job: SpeedSubject, table: SpeedTable | None = None, duration_s: float | None = None
) -> Speeds:
    """The speed of ``job`` (a :class:`~hetsched.model.job.Job`, or anything of its shape).

    ``table`` is the profile's throughput table; ``duration_s`` the job's true duration
    where the driver knows one (its run time on the fastest model when the job gives no
    work). Raises SpeedError when the job's speed information cannot be resolved.
    """
    speed = job.speed
    rates = _rates_of(job, speed, table)
    default_rate = rates.pop(DEFAULT_KEY, None)
    listed = list(rates.values())
    if default_rate is None:
        positive = [r for r in listed if r > 0]
        default_rate = min(positive) if positive else (0.0 if listed else 1.0)
    best = max([*listed, default_rate])
    if speed.work is not None:
        work = speed.work
    elif speed.work_s is not None:
        model = speed.work_model
        rate = default_rate if model is None else rates.get(_fold(model), default_rate)
        if rate <= 0:
            raise SpeedError(f"job {job.id}: work is a duration on {model}, where its rate is 0")
        work = speed.work_s * rate
    elif duration_s is not None:
        work = duration_s * best
    else:
        work = 0.0
    return Speeds(MappingProxyType(rates), float(default_rate), float(work))


def speed_of(job: SpeedSubject, model: str, table: SpeedTable | None = None) -> float:
    """The rate of ``job`` on device ``model`` (1.0 everywhere without speed information)."""
    return resolve(job, table).on(model)


def time_on(
    job: SpeedSubject, model: str, remaining: float, table: SpeedTable | None = None
) -> float:
    """Seconds ``job`` needs on ``model`` to do ``remaining`` work (inf where it cannot
    progress)."""
    return resolve(job, table).time_on(model, remaining)
