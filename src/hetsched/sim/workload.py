"""The neutral workload format: one CSV row per job, read and written with line numbers.

Columns (a header line naming all of them is required; order is free):

=============  =================================================================
submit_time    seconds since the start of the trace (``0``, ``12.5``), >= 0
duration       true run time of each task: seconds (``3600``) or ``90s/30m/2h/1d``
user           who owns the job (empty: ``default``)
queue          the queue it is submitted to (empty: ``default``)
priority       integer, larger is more important (empty: 0)
cpu            CPU per task, Kubernetes notation (``500m``, ``4``); empty: 0
memory         memory per task (``16Gi``, ``512Mi``); a plain number is bytes
device class   device class per task (``gpu``, ``fpga``, ...); empty: no device
count          devices of that class per task (empty: 1 when a class is given)
share          milli-units per device, 1..1000 (below 1000 needs count 1); empty: 1000
selector       CEL over ``device.attributes`` (``device.attributes["model"] in ["V100"]``)
gang           tasks of the job, started all-or-nothing (empty: 1)
=============  =================================================================

The device class column may be spelled ``device_class`` or ``device class``. Optional
columns: ``id`` names jobs (without it job ids are ``job-<line>``); ``estimate`` is the
runtime estimate the scheduler sees (for backfill), in the ``duration`` notation; and the
speed model (see :mod:`hetsched.model.speed`): ``speed`` (``A100:3.1;V100:1;T4:0.35``, the
whole job's rate per device model), ``work`` (steps, ``1.2e6``, or a duration on a model,
``2h@V100``) and ``job_type`` (a type of the profile's throughput table). With ``work`` as
a duration, ``duration`` may be left empty: it is then that duration. Checkpointing (see
:mod:`hetsched.model.checkpoint`): ``checkpoint_interval`` (seconds of running between two
checkpoints; ``0``: it never loses work), ``checkpoint_cost`` (seconds one checkpoint takes
to write, without progress) and ``checkpoint_notice`` (seconds of notice it uses to save
before a stop; empty: 0, a trace job saves only on its own schedule). A job with any of them
set is checkpointable.
Dependencies (see :mod:`hetsched.model.workflow`): ``after`` lists the ids of jobs this
one waits for, separated by ``;``, each waiting for its success or, with ``:failed`` or
``:ended``, for that end (``etl;eval:ended``); ``on_unmet`` is ``cancel`` (the default:
a dependency that can no longer be met cancels the job) or ``keep``. An id that names no
job of the workload, or a cycle, is an error.

Rows are validated with pydantic at the boundary; every problem is reported as
``FILE:LINE: FIELD: message`` (the header is line 1), and all of them are listed at once
(up to a limit) so a bad trace is fixed in one pass. Checks against a cluster (the
models and classes a row names exist there) are in :mod:`hetsched.sim.workload_check`.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from hetsched.model.checkpoint import MAX_NOTICE_S, Checkpointing
from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.model.quantity import QuantityError, format_cpu, format_memory, parse_cpu
from hetsched.model.quantity import parse_memory as _parse_memory
from hetsched.model.selector import SelectorError, compile_selector
from hetsched.model.specs import build_speed, parse_duration, parse_speed_map, parse_work
from hetsched.model.workflow import Dependency, Needs, OnUnmet, find_cycle

__all__ = [
    "CHECKPOINT_COLUMNS",
    "COLUMNS",
    "SPEED_COLUMNS",
    "Workload",
    "WorkloadError",
    "WorkloadJob",
    "read_workload",
    "write_workload",
]

#: the columns of the neutral format, in the order the writer uses
COLUMNS: tuple[str, ...] = (
    "submit_time",
    "duration",
    "user",
    "queue",
    "priority",
    "cpu",
    "memory",
    "device_class",
    "count",
    "share",
    "selector",
    "gang",
)
_OPTIONAL = ("id", "estimate", "after", "on_unmet")
#: the speed-model columns: optional, written only when a job of the workload uses them
SPEED_COLUMNS: tuple[str, ...] = ("job_type", "speed", "work")
#: the checkpoint columns: optional, written only when a job of the workload checkpoints
CHECKPOINT_COLUMNS: tuple[str, ...] = (
    "checkpoint_interval",
    "checkpoint_cost",
    "checkpoint_notice",
)
_MAX_ERRORS = 50


class WorkloadError(ValueError):
    """A workload that does not validate; ``errors`` holds one ``FILE:LINE: FIELD: msg`` each."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("\n".join(errors))


@dataclass(frozen=True, slots=True)
class WorkloadJob:
    """A job of a workload with its true task duration (the core sees only the estimate).

    ``line`` is the source line (0 when generated), so later checks can point at it.
    """

    job: Job
    duration_s: float
    line: int = 0


@dataclass(frozen=True, slots=True)
class Workload:
    """Jobs in submission order, and where they came from.

    ``jobs`` is a tuple when read from a file; a generated workload may keep its jobs as
    columns and build each when it is read (:class:`hetsched.sim.synthetic.SyntheticJobs`),
    so code reads it as a sequence (index, iterate, ``len``).
    """

    jobs: Sequence[WorkloadJob]
    source: str = ""

    def __len__(self) -> int:
        return len(self.jobs)


# -- one row at the boundary ------------------------------------------------------------


def _quantity(value: Any, parse: Any) -> int:
    text = str(value).strip()
    if text.startswith("-"):
        raise ValueError(f"must not be negative, got {text!r}")
    try:
        return int(parse(text))
    except QuantityError as exc:
        raise ValueError(str(exc)) from None


def _memory(text: str) -> int:
    return _parse_memory(text)


class RowSpec(BaseModel):
    """One CSV row; empty cells are left out before validation, so they take the defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str | None = Field(default=None, min_length=1, max_length=253)
    submit_time: float = Field(ge=0, allow_inf_nan=False)
    duration: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    user: str = "default"
    queue: str = "default"
    priority: int = 0
    cpu: int = 0
    memory: int = 0
    device_class: str | None = None
    count: int | None = Field(default=None, ge=1, le=1024)
    share: int = Field(default=SHARE_UNITS, ge=1, le=SHARE_UNITS)
    selector: str | None = None
    gang: int = Field(default=1, ge=1, le=100_000)
    estimate: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    job_type: str | None = None
    speed: dict[str, float] | None = None
    work: tuple[float | None, float | None, str | None] | None = None
    checkpoint_interval: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    checkpoint_cost: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    checkpoint_notice: float | None = Field(
        default=None, ge=0, le=MAX_NOTICE_S, allow_inf_nan=False
    )
    after: tuple[Dependency, ...] = ()
    on_unmet: OnUnmet = OnUnmet.CANCEL

    @field_validator("after", mode="before")
    @classmethod
    def _after(cls, value: Any) -> Any:
        out = []
        for part in str(value).split(";"):
            job, _, needs = part.strip().partition(":")
            if not job:
                raise ValueError(f"expected job ids separated by ';', got {value!r}")
            try:
                out.append(Dependency(job, Needs(needs or "succeeded")))
            except ValueError:
                raise ValueError(
                    f"{part.strip()!r}: the end is succeeded, failed or ended"
                ) from None
        return tuple(out)

    @field_validator("speed", mode="before")
    @classmethod
    def _speed(cls, value: Any) -> Any:
        return parse_speed_map(value)

    @field_validator("work", mode="before")
    @classmethod
    def _work(cls, value: Any) -> Any:
        return parse_work(str(value))

    @field_validator(
        "duration",
        "estimate",
        "checkpoint_interval",
        "checkpoint_cost",
        "checkpoint_notice",
        mode="before",
    )
    @classmethod
    def _duration(cls, value: Any) -> Any:
        text = str(value).strip()
        if text.startswith("-"):
            raise ValueError(f"must not be negative, got {text!r}")
        try:
            return float(text)
        except ValueError:
            return parse_duration(text)

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, value: Any) -> int:
        return _quantity(value, parse_cpu)

    @field_validator("memory", mode="before")
    @classmethod
    def _mem(cls, value: Any) -> int:
        return _quantity(value, _memory)

    @field_validator("selector")
    @classmethod
    def _selector(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                compile_selector(value)
            except SelectorError as exc:
                raise ValueError(str(exc)) from None
        return value

    def cross_errors(self) -> list[tuple[str, str]]:
        """Problems between fields, as (field, message)."""
        out: list[tuple[str, str]] = []
        has_class = self.device_class is not None
        if not has_class and self.count is not None:
            out.append(("count", "a device count needs a device class"))
        if not has_class and self.selector is not None:
            out.append(("selector", "a selector needs a device class"))
        if has_class and self.share < SHARE_UNITS and (self.count or 1) != 1:
            out.append(("share", f"a share below {SHARE_UNITS} needs count 1"))
        if self.duration is None and (self.work is None or self.work[1] is None):
            out.append(("duration", "required (or give work as a duration: 2h@V100)"))
        if self.checkpoint_cost is not None and (
            self.checkpoint_interval is None and not self.checkpoint_notice
        ):
            out.append(
                ("checkpoint_cost", "a job saves on an interval or a notice: give one of them")
            )
        try:
            build_speed(self.speed, self.work, self.job_type)
        except ValueError as exc:
            out.append(("work" if self.work is not None else "speed", str(exc)))
        return out

    def _checkpointing(self) -> Checkpointing | None:
        given = (self.checkpoint_interval, self.checkpoint_cost, self.checkpoint_notice)
        if all(v is None for v in given):
            return None
        return Checkpointing(
            self.checkpoint_interval,
            self.checkpoint_notice or 0.0,
            cost_s=self.checkpoint_cost or 0.0,
        )

    def build(self, line: int) -> WorkloadJob:
        devices: tuple[DeviceRequest, ...] = ()
        if self.device_class is not None:
            devices = (
                DeviceRequest.of(self.device_class, self.count or 1, self.share, self.selector),
            )
        job = Job(
            id=self.id or f"job-{line}",
            resources=TaskRequest(self.cpu, self.memory, devices),
            user=self.user,
            queue=self.queue,
            priority=self.priority,
            replicas=self.gang,
            estimated_runtime_s=self.estimate,
            submit_time=self.submit_time,
            speed=build_speed(self.speed, self.work, self.job_type),
            checkpoint=self._checkpointing(),
            after=self.after,
            on_unmet=self.on_unmet,
        )
        duration = self.duration
        if duration is None:
            assert self.work is not None and self.work[1] is not None  # cross_errors checked
            duration = self.work[1]
        return WorkloadJob(job, duration, line)


def _field_name(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "row"


# -- reading ----------------------------------------------------------------------------


def _header(names: Sequence[str], source: str) -> list[str]:
    normalized = [n.strip().lower().replace(" ", "_") for n in names]
    errors = [f"{source}:1: header: missing column {c!r}" for c in COLUMNS if c not in normalized]
    known = set(COLUMNS) | set(_OPTIONAL) | set(SPEED_COLUMNS) | set(CHECKPOINT_COLUMNS)
    errors += [
        f"{source}:1: header: unknown column {n!r} (expected {', '.join(COLUMNS)})"
        for n in normalized
        if n not in known
    ]
    duplicates = sorted({n for n in normalized if normalized.count(n) > 1})
    errors += [f"{source}:1: header: column {n!r} appears twice" for n in duplicates]
    if errors:
        raise WorkloadError(errors)
    return normalized


def parse_rows(lines: Iterable[str], source: str) -> Workload:
    """Parse the neutral CSV from ``lines``; raises WorkloadError listing every bad row."""
    reader = csv.reader(lines)
    try:
        names = next(reader)
    except StopIteration:
        raise WorkloadError([f"{source}:1: header: the file is empty"]) from None
    columns = _header(names, source)
    jobs: list[WorkloadJob] = []
    errors: list[str] = []
    ids: dict[str, int] = {}
    for cells in reader:
        line = reader.line_num
        if not cells or all(not c.strip() for c in cells):
            continue
        if cells[0].lstrip().startswith("#"):
            continue
        if len(cells) != len(columns):
            errors.append(f"{source}:{line}: row: expected {len(columns)} fields, got {len(cells)}")
        else:
            try:
                row = RowSpec.model_validate(
                    {c: v.strip() for c, v in zip(columns, cells, strict=True) if v.strip()}
                )
            except ValidationError as exc:
                for err in exc.errors():
                    message = str(err["msg"]).removeprefix("Value error, ")
                    errors.append(f"{source}:{line}: {_field_name(tuple(err['loc']))}: {message}")
            else:
                problems = row.cross_errors()
                errors += [f"{source}:{line}: {f}: {m}" for f, m in problems]
                if not problems:
                    item = row.build(line)
                    first = ids.setdefault(item.job.id, line)
                    if first != line:
                        errors.append(
                            f"{source}:{line}: id: duplicate job id {item.job.id!r} "
                            f"(first on line {first})"
                        )
                    jobs.append(item)
        if len(errors) >= _MAX_ERRORS:
            errors.append(f"{source}: stopped after {_MAX_ERRORS} errors")
            break
    errors += _dependency_errors(jobs, source) if not errors else []
    if errors:
        raise WorkloadError(errors)
    jobs.sort(key=lambda j: j.job.submit_time)  # stable: ties keep file order
    return Workload(tuple(jobs), source)


def _dependency_errors(jobs: Sequence[WorkloadJob], source: str) -> list[str]:
    """``after`` ids that name no job of the workload, and a cycle."""
    ids = {item.job.id for item in jobs}
    errors = [
        f"{source}:{item.line}: after: no job {d.job!r} in the workload"
        for item in jobs
        for d in item.job.after
        if d.job not in ids
    ]
    edges = {item.job.id: [d.job for d in item.job.after] for item in jobs if item.job.after}
    cycle = None if errors else find_cycle(edges)
    if cycle is not None:
        errors.append(f"{source}: after: dependency cycle: {' -> '.join(cycle)}")
    return errors


def read_workload(path: str | Path) -> Workload:
    """Read a neutral-format CSV file; raises WorkloadError (file, line, field) on bad input."""
    source = str(path)
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return parse_rows(handle, source)
    except OSError as exc:
        raise WorkloadError([f"{source}: cannot read: {exc.strerror}"]) from None
    except UnicodeDecodeError as exc:
        raise WorkloadError([f"{source}: not UTF-8 text: {exc.reason}"]) from None


# -- writing ----------------------------------------------------------------------------


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def speed_cells(item: WorkloadJob) -> list[str]:
    """The :data:`SPEED_COLUMNS` cells of one job (empty where it says nothing)."""
    speed = item.job.speed
    rates = ";".join(f"{m}:{_number(r)}" for m, r in speed.rates.items())
    work = speed.describe_work()
    return [speed.job_type or "", rates, work]


def checkpoint_cells(item: WorkloadJob) -> list[str]:
    """The :data:`CHECKPOINT_COLUMNS` cells of one job (empty where it does not checkpoint)."""
    spec = item.job.checkpoint
    if spec is None:
        return ["", "", ""]
    interval = "" if spec.interval_s is None else _number(spec.interval_s)
    return [interval, _number(spec.cost_s), _number(spec.notice_s)]


def row_of(item: WorkloadJob) -> list[str]:
    """The CSV cells of one job: ``id``, then :data:`COLUMNS`, then ``estimate``."""
    job = item.job
    request = job.resources
    choice = request.devices[0].primary if request.devices else None
    return [
        job.id,
        _number(job.submit_time),
        _number(item.duration_s),
        job.user,
        job.queue,
        str(job.priority),
        format_cpu(request.cpu_milli) if request.cpu_milli else "",
        format_memory(request.memory_mib) if request.memory_mib else "",
        choice.device_class if choice else "",
        str(choice.count) if choice else "",
        str(choice.share) if choice and choice.share != SHARE_UNITS else "",
        (choice.selector or "") if choice else "",
        str(job.replicas),
        "" if job.estimated_runtime_s is None else _number(job.estimated_runtime_s),
    ]


def write_workload(path: str | Path, workload: Workload | Iterable[WorkloadJob]) -> int:
    """Write jobs in the neutral format (with ``id`` and ``estimate``); returns the row count.

    Only the primary choice of the first device request is representable; richer jobs
    are written with that choice alone.
    """
    items = workload.jobs if isinstance(workload, Workload) else tuple(workload)
    speeds = any(item.job.speed.known for item in items)
    checkpoints = any(item.job.checkpoint is not None for item in items)
    header = ["id", *COLUMNS, "estimate", *(SPEED_COLUMNS if speeds else ())]
    header += CHECKPOINT_COLUMNS if checkpoints else ()
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        for item in items:
            row = row_of(item) + (speed_cells(item) if speeds else [])
            writer.writerow(row + (checkpoint_cells(item) if checkpoints else []))
    return len(items)
