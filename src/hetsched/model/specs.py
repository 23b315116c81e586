"""Spec files at the boundary: pydantic models with field-path errors, turned into the
frozen dataclasses the core uses. The core never sees an unvalidated value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from yaml import YAMLError

from hetsched.model.checkpoint import (
    DEFAULT_NOTICE_S,
    DEFAULT_SIGNAL,
    MAX_NOTICE_S,
    Checkpointing,
    signal_name,
)
from hetsched.model.device import SHARE_UNITS, AttrValue, Health, Node, Taint, TaintEffect
from hetsched.model.job import (
    DeviceChoice,
    DeviceFailurePolicy,
    DeviceRequest,
    Job,
    RestartPolicy,
    TaskRequest,
    Toleration,
)
from hetsched.model.quantity import QuantityError, parse_cpu, parse_memory
from hetsched.model.selector import SelectorError, compile_selector
from hetsched.model.spec_build import NO_SPEED, build_cluster, build_jobs, expand_node, with_models
from hetsched.model.speed import DEFAULT_KEY, JobSpeed, SpeedError
from hetsched.model.yamlio import safe_load

__all__ = [
    "CheckpointSpec",
    "ClusterSpec",
    "JobsSpec",
    "SpecError",
    "format_errors",
    "load_cluster",
    "load_jobs",
    "load_yaml",
    "parse_cluster",
    "parse_duration",
    "parse_jobs",
    "parse_speed_map",
    "parse_work",
]


class SpecError(ValueError):
    """A spec that does not validate. ``errors`` holds one ``path: message`` per problem."""

    def __init__(self, errors: list[str], source: str = "") -> None:
        self.errors = errors
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(head + ("\n" + head).join(errors))


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("function-") or part in {"str", "int", "float", "bool"}:
            continue  # pydantic's union-branch labels say nothing to a user
        else:
            out += f".{part}" if out else part
    return out


def format_errors(exc: ValidationError) -> list[str]:
    """``jobs[1].resources.devices[0].share: must be 1..1000, got 1500``, one per error."""
    out: list[str] = []
    for err in exc.errors():
        message = str(err["msg"]).removeprefix("Value error, ")
        line = f"{_path(tuple(err['loc']))}: {message}"
        if line not in out:
            out.append(line)
    return out


_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: str | int | float) -> float:
    """Seconds from ``90``, ``"90s"``, ``"30m"``, ``"2h"``, ``"1d"``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"must not be negative, got {value}")
        return float(value)
    match = _DURATION.match(value)
    if match is None:
        raise ValueError(f"not a duration: {value!r} (expected e.g. 90, 90s, 30m, 2h)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


_NUMBER = re.compile(r"^\s*[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?\s*$")


def parse_work(value: str | int | float) -> tuple[float | None, float | None, str | None]:
    """(steps, seconds, model) from ``1.2e6`` (steps), ``2h@V100`` (two hours on a V100)
    or ``2h`` (two hours on any model: only for jobs without speeds)."""
    if isinstance(value, bool):
        raise ValueError(f"expected work in steps or DURATION@MODEL, got {value!r}")
    if isinstance(value, int | float):
        if not value > 0 or value == float("inf"):
            raise ValueError(f"work must be > 0, got {value}")
        return float(value), None, None
    text = value.strip()
    if _NUMBER.match(text):
        return parse_work(float(text))
    duration, at, model = text.partition("@")
    if at and not model.strip():
        raise ValueError(f"work {value!r}: no model after '@' (expected e.g. 2h@V100)")
    try:
        seconds = parse_duration(duration.strip())
    except ValueError:
        raise ValueError(
            f"work {value!r}: expected steps (1.2e6) or a duration on a model (2h@V100)"
        ) from None
    if seconds <= 0:
        raise ValueError(f"work {value!r}: the duration must be > 0")
    return None, seconds, (model.strip() or None)


def parse_speed_map(value: Any) -> dict[str, float]:
    """Device model -> rate from a mapping or ``A100:3.1;V100:1`` (``;``, ``,`` or spaces
    between entries); rates finite and >= 0, at least one above 0, no model twice."""
    if isinstance(value, str):
        entries: dict[str, Any] = {}
        for part in re.split(r"[;,\s]+", value.strip()):
            if not part:
                continue
            model, sep, rate = part.replace("=", ":").partition(":")
            if not sep or not model:
                raise ValueError(f"speed entry {part!r}: expected MODEL:RATE")
            entries[model] = rate
        value = entries
    if not isinstance(value, dict):
        raise ValueError(f"expected a map of device model to rate, got {value!r}")
    out: dict[str, float] = {}
    seen: dict[str, str] = {}
    for model, raw in value.items():
        name = str(model).strip()
        if not name:
            raise ValueError("a device model name is empty")
        try:
            rate = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: rate must be a number, got {raw!r}") from None
        if isinstance(raw, bool) or not (rate >= 0 and rate != float("inf")):
            raise ValueError(f"{name}: rate must be finite and >= 0, got {raw!r}")
        folded = name.casefold()
        if folded in seen:
            raise ValueError(f"model {name!r} appears twice (as {seen[folded]!r})")
        seen[folded] = name
        out[name] = rate
    if not out:
        raise ValueError("a speed map needs at least one model")
    if all(r == 0 for r in out.values()):
        raise ValueError("a speed map needs at least one rate above 0")
    return out


def build_speed(
    speed: dict[str, float] | None,
    work: tuple[float | None, float | None, str | None] | None,
    job_type: str | None,
) -> JobSpeed:
    """The JobSpeed of a spec's ``speed``, ``work`` and ``job_type``; ValueError naming
    what does not fit together."""
    if not speed and work is None and job_type is None:
        return NO_SPEED  # most jobs say nothing about speed: one shared, immutable value
    steps, seconds, model = work if work is not None else (None, None, None)
    listed = {m.casefold() for m in speed or {}}
    if (
        model is not None
        and listed
        and DEFAULT_KEY not in listed
        and model.casefold() not in listed
    ):
        raise ValueError(f"work is a duration on {model}, which the speed map does not list")
    try:
        return JobSpeed(speed or {}, job_type, steps, seconds, model)
    except SpeedError as exc:
        raise ValueError(str(exc)) from None


class _Strict(BaseModel):
    # built at first use, not at import: most spec files never need the models (see
    # parse_cluster), and every command imports them
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


def _cpu(value: Any) -> int:
    try:
        return parse_cpu(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None


def _memory(value: Any) -> int:
    try:
        return parse_memory(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None


# -- clusters ---------------------------------------------------------------------------


class DeviceGroupSpec(_Strict):
    device_class: str = Field(alias="class", min_length=1)
    vendor: str = ""
    model: str = ""
    count: int = Field(default=1, ge=1, le=1024)
    attributes: dict[str, AttrValue] = Field(default_factory=dict)
    health: Health = Health.HEALTHY


def number_devices(groups: Iterable[DeviceGroupSpec]) -> Iterator[tuple[DeviceGroupSpec, int]]:
    """Each device of the groups with its index within its class, counting from 0 across
    groups (two groups of 2 GPUs give gpu0..gpu3): the index device ids end in."""
    per_class: dict[str, int] = {}
    for group in groups:
        for _ in range(group.count):
            index = per_class.get(group.device_class, 0)
            per_class[group.device_class] = index + 1
            yield group, index


class TaintSpec(_Strict):
    key: str = Field(min_length=1)
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


class NodeSpec(_Strict):
    name: str = Field(min_length=1)
    replicas: int | None = Field(default=None, ge=1, le=100_000)
    cpu_milli: int = Field(alias="cpu")
    memory_mib: int = Field(alias="memory")
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    devices: list[DeviceGroupSpec] = Field(default_factory=list)

    _parse_cpu = field_validator("cpu_milli", mode="before")(lambda cls, v: _cpu(v))
    _parse_mem = field_validator("memory_mib", mode="before")(lambda cls, v: _memory(v))

    def expand(self) -> list[Node]:
        return expand_node(
            self.name,
            self.replicas,
            self.cpu_milli,
            self.memory_mib,
            self.labels,
            tuple(Taint(t.key, t.value, t.effect) for t in self.taints),
            [
                (g.device_class, g.vendor, g.model, g.attributes, g.count, g.health)
                for g in self.devices
            ],
        )


class ClusterSpec(_Strict):
    nodes: list[NodeSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _replicas_need_pattern(self) -> ClusterSpec:
        for node in self.nodes:
            if node.replicas is not None and node.replicas > 1 and "{i}" not in node.name:
                raise ValueError(f"node {node.name!r}: replicas > 1 needs '{{i}}' in the name")
        return self

    def build(self) -> list[Node]:
        nodes = [n for spec in self.nodes for n in spec.expand()]
        seen: set[str] = set()
        for index, node in enumerate(nodes):
            if node.name in seen:
                raise SpecError([f"nodes: duplicate node name {node.name!r} (node #{index})"])
            seen.add(node.name)
        return nodes


# -- jobs -------------------------------------------------------------------------------


def _check_selector(value: str | None) -> str | None:
    if value is not None:
        try:
            compile_selector(value)
        except SelectorError as exc:
            raise ValueError(str(exc)) from None
    return value


class DeviceChoiceSpec(_Strict):
    device_class: str = Field(alias="class", min_length=1)
    count: int = Field(default=1, ge=1, le=1024)
    share: int = SHARE_UNITS
    selector: str | None = None
    #: shorthand for a selector on the model attribute
    model: str | list[str] | None = None

    @field_validator("share")
    @classmethod
    def _share(cls, value: int) -> int:
        if not 1 <= value <= SHARE_UNITS:
            raise ValueError(f"must be 1..{SHARE_UNITS}, got {value}")
        return value

    _selector = field_validator("selector")(lambda cls, v: _check_selector(v))

    @model_validator(mode="after")
    def _fraction_needs_one(self) -> DeviceChoiceSpec:
        if self.share < SHARE_UNITS and self.count != 1:
            raise ValueError(f"a share below {SHARE_UNITS} needs count 1, got count {self.count}")
        return self

    @model_validator(mode="after")
    def _combined_within_limits(self) -> DeviceChoiceSpec:
        # the selector the core evaluates is the user's and the model shorthand together
        if self.model is not None:
            try:
                compile_selector(self._selector_with_models() or "")
            except SelectorError as exc:
                raise ValueError(f"selector with model: {exc}") from None
        return self

    def _selector_with_models(self) -> str | None:
        if self.model is None:
            return self.selector
        models = (self.model,) if isinstance(self.model, str) else tuple(self.model)
        return with_models(self.selector, models)

    def build(self) -> DeviceChoice:
        selector = self._selector_with_models()
        return DeviceChoice(self.device_class, self.count, self.share, selector)


class DeviceRequestSpec(DeviceChoiceSpec):
    #: tried in order after this choice, the first that fits a node wins
    alternatives: list[DeviceChoiceSpec] = Field(default_factory=list)

    def build_request(self) -> DeviceRequest:
        return DeviceRequest((self.build(), *(a.build() for a in self.alternatives)))


class TolerationSpec(_Strict):
    key: str = ""
    value: str | None = None
    effect: TaintEffect | None = None


class ResourcesSpec(_Strict):
    cpu_milli: int = Field(default=0, alias="cpu")
    memory_mib: int = Field(default=0, alias="memory")
    devices: list[DeviceRequestSpec] = Field(default_factory=list)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[TolerationSpec] = Field(default_factory=list)

    _parse_cpu = field_validator("cpu_milli", mode="before")(lambda cls, v: _cpu(v))
    _parse_mem = field_validator("memory_mib", mode="before")(lambda cls, v: _memory(v))

    def build(self) -> TaskRequest:
        return TaskRequest(
            self.cpu_milli,
            self.memory_mib,
            tuple(d.build_request() for d in self.devices),
            self.node_selector,
            tuple(Toleration(t.key, t.value, t.effect) for t in self.tolerations),
        )


class CheckpointSpec(_Strict):
    """``checkpoint: {interval_s: 10m, notice_s: 30s, signal: SIGUSR1, cost_s: 5s}``
    (``interval``, ``notice`` and ``cost`` are accepted for the ``_s`` names; durations in
    the ``90s/30m/2h`` notation)."""

    interval_s: float | None = Field(default=None, alias="interval")
    notice_s: float = Field(default=DEFAULT_NOTICE_S, alias="notice")
    signal: str = DEFAULT_SIGNAL
    cost_s: float = Field(default=0.0, alias="cost")

    @field_validator("interval_s", "notice_s", "cost_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str | int | float):
            raise ValueError(f"expected a duration (90, 90s, 30m, 2h), got {value!r}")
        seconds = parse_duration(value)
        if not math.isfinite(seconds):
            raise ValueError(f"must be finite, got {value!r}")
        return seconds

    @field_validator("notice_s")
    @classmethod
    def _notice(cls, value: float) -> float:
        if value > MAX_NOTICE_S:
            raise ValueError(
                f"at most {MAX_NOTICE_S:g}s (a notice holds what its preemptor waits for)"
            )
        return value

    @field_validator("signal", mode="before")
    @classmethod
    def _signal(cls, value: Any) -> str:
        return signal_name(value)

    def build(self) -> Checkpointing:
        return Checkpointing(self.interval_s, self.notice_s, self.signal, self.cost_s)


class JobSpec(_Strict):
    name: str = Field(min_length=1, max_length=253)
    id: str | None = Field(default=None, min_length=1, max_length=253)
    user: str = "default"
    queue: str = "default"
    priority: int = 0
    replicas: int = Field(default=1, ge=1, le=100_000)
    gang: int | None = Field(default=None, ge=1)
    preemptible: bool = True
    estimated_runtime_s: float | None = Field(default=None, alias="estimated_runtime")
    max_runtime_s: float | None = Field(default=None, alias="max_runtime")
    restart_policy: RestartPolicy = RestartPolicy.NEVER
    max_restarts: int = Field(default=0, ge=0)
    submit_time: float = Field(default=0.0, ge=0)
    on_device_failure: DeviceFailurePolicy = DeviceFailurePolicy.REQUEUE
    best_effort: bool = False
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    #: device model -> rate of the whole job there (steps/s or relative)
    speed: dict[str, float] | None = None
    #: total work: steps (``1.2e6``) or a duration on a model (``2h@V100``)
    work: float | str | None = None
    #: a job type of the profile's throughput table (``speeds`` section)
    job_type: str | None = Field(default=None, min_length=1)
    #: how the job saves its state: it gets a notice before a stop and resumes after
    checkpoint: CheckpointSpec | None = None

    _speed = field_validator("speed", mode="before")(
        lambda cls, v: None if v is None else parse_speed_map(v)
    )

    @field_validator("work", mode="before")
    @classmethod
    def _work(cls, value: Any) -> Any:
        if value is None:
            return None
        parse_work(value)
        return value

    @field_validator("estimated_runtime_s", "max_runtime_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)

    @model_validator(mode="after")
    def _gang_within_replicas(self) -> JobSpec:
        if self.gang is not None and self.gang > self.replicas:
            raise ValueError(f"gang must be 1..replicas ({self.replicas}), got {self.gang}")
        self.job_speed()
        return self

    def job_speed(self) -> JobSpeed:
        work = None if self.work is None else parse_work(self.work)
        return build_speed(self.speed, work, self.job_type)

    def build(self, requests: dict[TaskRequest, TaskRequest] | None = None) -> Job:
        """The job; with ``requests``, its request is the equal one already there (added
        when new), so equal requests are one object."""
        resources = self.resources.build()
        if requests is not None:
            resources = requests.setdefault(resources, resources)
        return Job(
            id=self.id or self.name,
            resources=resources,
            name=self.name,
            user=self.user,
            queue=self.queue,
            priority=self.priority,
            replicas=self.replicas,
            gang=self.gang,
            preemptible=self.preemptible,
            estimated_runtime_s=self.estimated_runtime_s,
            max_runtime_s=self.max_runtime_s,
            restart_policy=self.restart_policy,
            max_restarts=self.max_restarts,
            submit_time=self.submit_time,
            on_device_failure=self.on_device_failure,
            best_effort=self.best_effort,
            speed=self.job_speed(),
            checkpoint=None if self.checkpoint is None else self.checkpoint.build(),
        )


class JobsSpec(_Strict):
    jobs: list[JobSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_ids(self) -> JobsSpec:
        seen: dict[str, int] = {}
        for index, job in enumerate(self.jobs):
            job_id = job.id or job.name
            if job_id in seen:
                raise ValueError(
                    f"jobs[{index}]: duplicate job id {job_id!r} (first at jobs[{seen[job_id]}])"
                )
            seen[job_id] = index
        return self

    def build(self) -> list[Job]:
        # jobs of one request share one TaskRequest: the core's per-request caches then
        # find it by identity instead of comparing requests field by field
        requests: dict[TaskRequest, TaskRequest] = {}
        return [j.build(requests) for j in self.jobs]


# -- loading ----------------------------------------------------------------------------

Kind = Literal["cluster", "jobs", "profile"]


def load_yaml(path: str | Path) -> Any:
    """A YAML file's one document (read with the C loader where there is one)."""
    try:
        with open(path, "rb") as handle:
            return safe_load(handle.read())
    except OSError as exc:
        raise SpecError([f"cannot read: {exc.strerror}"], str(path)) from None
    except YAMLError as exc:
        raise SpecError([f"not valid YAML: {' '.join(str(exc).split())}"], str(path)) from None


def parse_cluster(data: Any, source: str = "") -> list[Node]:
    """The nodes of a cluster document; SpecError naming every problem."""
    nodes = build_cluster(data, _node_entry)
    if nodes is not None:
        return nodes
    try:
        return ClusterSpec.model_validate(data).build()
    except ValidationError as exc:
        raise SpecError(format_errors(exc), source) from None


def parse_jobs(data: Any, source: str = "") -> list[Job]:
    """The jobs of a jobs document; SpecError naming every problem."""
    jobs = build_jobs(data, _job_entry)
    if jobs is not None:
        return jobs
    try:
        return JobsSpec.model_validate(data).build()
    except ValidationError as exc:
        raise SpecError(format_errors(exc), source) from None


def _node_entry(raw: Any) -> list[Node] | None:
    """One node entry the plain path leaves to the model; None when it is not valid."""
    try:
        node = NodeSpec.model_validate(raw)
    except ValidationError:
        return None
    if node.replicas is not None and node.replicas > 1 and "{i}" not in node.name:
        return None
    return node.expand()


def _job_entry(raw: Any, requests: dict[TaskRequest, TaskRequest]) -> Job | None:
    """One job the plain path leaves to the model; None when it is not valid."""
    try:
        return JobSpec.model_validate(raw).build(requests)
    except ValidationError:
        return None


def load_cluster(path: str | Path) -> list[Node]:
    return parse_cluster(load_yaml(path), str(path))


def load_jobs(path: str | Path) -> list[Job]:
    return parse_jobs(load_yaml(path), str(path))
