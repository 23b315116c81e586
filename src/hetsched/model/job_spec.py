"""Job files: the pydantic models of ``jobs:`` (the one statement of their rules) and the
jobs they build.

A spec file repeats few distinct device choices and requests thousands of times: each
distinct one is built once (:func:`_choice`, :func:`_request`, :func:`_plain_request`, from
values the models have already validated), so jobs of equal requests share one
TaskRequest object, which the core's per-request caches then find by identity.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from functools import lru_cache
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from hetsched.model.checkpoint import (
    DEFAULT_NOTICE_S,
    DEFAULT_SIGNAL,
    MAX_NOTICE_S,
    Checkpointing,
    signal_name,
)
from hetsched.model.device import SHARE_UNITS, TaintEffect
from hetsched.model.job import (
    DeviceChoice,
    DeviceFailurePolicy,
    DeviceRequest,
    Job,
    ResizeMode,
    RestartPolicy,
    TaskGroup,
    TaskRequest,
    Toleration,
)
from hetsched.model.selector import SelectorError, compile_selector
from hetsched.model.spec_common import SpecError, Strict, format_errors
from hetsched.model.spec_values import (
    Cpu,
    Memory,
    build_speed,
    parse_duration,
    parse_speed_map,
    parse_work,
)
from hetsched.model.speed import NO_SPEED, JobSpeed
from hetsched.model.topology_spec import TopologySpec
from hetsched.model.workflow import Dependency, Needs, OnUnmet, find_cycle, parse_array

__all__ = [
    "AfterSpec",
    "CheckpointSpec",
    "DeviceChoiceSpec",
    "DeviceRequestSpec",
    "GroupSpec",
    "JobSpec",
    "JobsSpec",
    "ResourcesSpec",
    "TolerationSpec",
    "parse_jobs",
    "validate_jobs",
    "with_models",
]


@lru_cache(maxsize=4096)
def with_models(selector: str | None, models: tuple[str, ...]) -> str:
    """The selector of a choice with the model shorthand (many jobs name the same models)."""
    # JSON string literals are CEL string literals: a quote in a name cannot escape
    quoted = ", ".join(json.dumps(m) for m in models)
    by_model = f'device.attributes["model"] in [{quoted}]'
    return by_model if selector is None else f"({selector}) && {by_model}"


@lru_cache(maxsize=4096)
def _choice(cls: str, count: int, share: int, selector: str | None) -> DeviceChoice:
    return DeviceChoice(cls, count, share, selector)


@lru_cache(maxsize=4096)
def _request(choices: tuple[DeviceChoice, ...]) -> DeviceRequest:
    return DeviceRequest(choices)


@lru_cache(maxsize=4096)
def _plain_request(cpu: int, memory: int, devices: tuple[DeviceRequest, ...]) -> TaskRequest:
    """A request without a node selector or tolerations."""
    return TaskRequest(cpu, memory, devices)


def _check_selector(value: str | None) -> str | None:
    if value is not None:
        try:
            compile_selector(value)
        except SelectorError as exc:
            raise ValueError(str(exc)) from None
    return value


class DeviceChoiceSpec(Strict):
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
    def _consistent(self) -> DeviceChoiceSpec:
        if self.share < SHARE_UNITS and self.count != 1:
            raise ValueError(f"a share below {SHARE_UNITS} needs count 1, got count {self.count}")
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
        return _choice(self.device_class, self.count, self.share, self._selector_with_models())


class DeviceRequestSpec(DeviceChoiceSpec):
    #: tried in order after this choice, the first that fits a node wins
    alternatives: list[DeviceChoiceSpec] = Field(default_factory=list)

    def build_request(self) -> DeviceRequest:
        return _request((self.build(), *(a.build() for a in self.alternatives)))


class TolerationSpec(Strict):
    key: str = ""
    value: str | None = None
    effect: TaintEffect | None = None


class ResourcesSpec(Strict):
    cpu_milli: Cpu = Field(default=0, alias="cpu")
    memory_mib: Memory = Field(default=0, alias="memory")
    devices: list[DeviceRequestSpec] = Field(default_factory=list)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[TolerationSpec] = Field(default_factory=list)

    def build(self) -> TaskRequest:
        devices = tuple([d.build_request() for d in self.devices])
        if not self.node_selector and not self.tolerations:
            return _plain_request(self.cpu_milli, self.memory_mib, devices)
        return TaskRequest(
            self.cpu_milli,
            self.memory_mib,
            devices,
            self.node_selector,
            tuple(Toleration(t.key, t.value, t.effect) for t in self.tolerations),
        )


class CheckpointSpec(Strict):
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


class AfterSpec(Strict):
    """``{job: etl-2, state: failed}``: wait for that end of a job (a name or an id)."""

    job: str = Field(min_length=1, max_length=253)
    state: Needs = Needs.SUCCEEDED


class GroupSpec(Strict):
    """One group of a heterogeneous job: ``{name: workers, replicas: 8, resources: {...},
    command: [...]}`` (``command``: what its tasks run instead of the job's)."""

    name: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    replicas: int = Field(default=1, ge=1, le=100_000)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    command: list[str] | None = Field(default=None, min_length=1, max_length=4096)

    def build(self) -> TaskGroup:
        return TaskGroup(self.name, self.replicas, self.resources.build())


class JobSpec(Strict):
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
    #: jobs it waits for: names or ids (``succeeded``), or ``{job, state}``
    after: list[AfterSpec] = Field(default_factory=list, max_length=100)
    #: a dependency that can no longer be met: ``cancel`` it (default) or ``keep`` it
    on_unmet: OnUnmet = OnUnmet.CANCEL
    #: an array of indexed elements in Slurm's syntax: ``0-999%50``, ``1-7:2``, ``0,3,5``
    array: str | None = Field(default=None, min_length=1, max_length=4096)
    #: elastic: it runs with any count from this to ``replicas`` (docs/elastic.md)
    min_replicas: int | None = Field(default=None, ge=1)
    #: how an elastic job changes its count while it runs: ``checkpoint`` or ``live``
    resize: ResizeMode = ResizeMode.CHECKPOINT
    #: heterogeneous: task groups with their own resources, placed all or nothing
    groups: list[GroupSpec] | None = Field(default=None, min_length=1, max_length=64)
    #: where its tasks go in the network: ``{required|preferred: LABEL}``, slices
    topology: TopologySpec | None = None

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

    @field_validator("after", mode="before")
    @classmethod
    def _after(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"job": item} if isinstance(item, str) else item for item in value]
        return value

    @field_validator("array")
    @classmethod
    def _array(cls, value: str | None) -> str | None:
        if value is not None:
            parse_array(value)
        return value

    def dependencies(self) -> tuple[Dependency, ...]:
        """``after`` as the core reads it (names not resolved: see :class:`JobsSpec`)."""
        return tuple(Dependency(a.job, a.state) for a in self.after)

    @field_validator("estimated_runtime_s", "max_runtime_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)

    @model_validator(mode="after")
    def _gang_within_replicas(self) -> JobSpec:
        if self.gang is not None and self.gang > self.replicas:
            raise ValueError(f"gang must be 1..replicas ({self.replicas}), got {self.gang}")
        if self.groups is not None:  # first: its replicas, gang and bounds are per group
            self._check_groups(self.groups)
        if self.min_replicas is not None:
            if self.min_replicas > self.replicas:
                raise ValueError(
                    f"min_replicas must be 1..replicas ({self.replicas}), got {self.min_replicas}"
                )
            if self.gang is not None:
                raise ValueError("min_replicas and gang: set one (min_replicas is the gang)")
        self.job_speed()  # speed, work and job type fit together
        size = None if self.topology is None else self.topology.slice_size
        if size is not None and self.replicas % size:
            raise ValueError(
                f"topology.slice_size: replicas ({self.replicas}) must be a multiple of {size}"
            )
        return self

    @model_validator(mode="after")
    def _resize_needs_bounds(self, info: ValidationInfo) -> JobSpec:
        # a body stored before this rule was accepted then: it still loads
        stored = isinstance(info.context, dict) and info.context.get("stored")
        if "resize" in self.model_fields_set and self.min_replicas is None and not stored:
            raise ValueError(
                "resize: only an elastic job is resized; set min_replicas (it then runs "
                "with any count from min_replicas to replicas)"
            )
        return self

    def _check_groups(self, groups: list[GroupSpec]) -> None:
        names = [g.name for g in groups]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"groups: each name once, got {', '.join(twice)} more than once")
        given = self.model_fields_set
        for field in ("replicas", "resources", "gang", "min_replicas"):
            if field in given:
                raise ValueError(
                    f"{field}: a job with groups sets replicas and resources per group "
                    "(and is one gang of all of them); leave it out"
                )

    def job_speed(self) -> JobSpeed:
        if self.speed is None and self.work is None and self.job_type is None:
            return NO_SPEED  # most jobs say nothing about their speed
        work = None if self.work is None else parse_work(self.work)
        return build_speed(self.speed, work, self.job_type)

    def build(self, requests: dict[TaskRequest, TaskRequest] | None = None) -> Job:
        """The job; with ``requests``, its request is the equal one already there (added
        when new), so equal requests are one object."""
        groups = tuple(g.build() for g in self.groups or ())
        resources = groups[0].resources if groups else self.resources.build()
        if requests is not None:
            resources = requests.setdefault(resources, resources)
        return Job(
            id=self.id or self.name,
            resources=resources,
            name=self.name,
            user=self.user,
            queue=self.queue,
            priority=self.priority,
            replicas=sum(g.replicas for g in groups) if groups else self.replicas,
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
            after=self.dependencies(),
            on_unmet=self.on_unmet,
            array=None if self.array is None else parse_array(self.array),
            min_replicas=self.min_replicas,
            resize=self.resize,
            groups=groups,
            topology=None if self.topology is None else self.topology.build(),
        )


class JobsSpec(Strict):
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
        self._no_cycle()
        return self

    def ids_by_reference(self) -> dict[str, str]:
        """What ``after`` may name within the file: each job's id, and each name that one
        job has, to that job's id."""
        names: dict[str, list[str]] = {}
        for job in self.jobs:
            names.setdefault(job.name, []).append(job.id or job.name)
        out = {name: ids[0] for name, ids in names.items() if len(ids) == 1}
        out.update((job.id or job.name, job.id or job.name) for job in self.jobs)
        return out

    def _no_cycle(self) -> None:
        refs = self.ids_by_reference()
        named = Counter(job.name for job in self.jobs)
        for index, job in enumerate(self.jobs):
            for k, dep in enumerate(job.after):
                if dep.job not in refs and named[dep.job] > 1:
                    raise ValueError(
                        f"jobs[{index}].after[{k}]: {named[dep.job]} jobs of this file are"
                        f" named {dep.job!r} (name one by its id)"
                    )
        edges = {
            job.id or job.name: [refs[d.job] for d in job.dependencies() if d.job in refs]
            for job in self.jobs
        }
        cycle = find_cycle(edges)
        if cycle is not None:
            raise ValueError("jobs: dependency cycle: " + " -> ".join(cycle))

    def build(self) -> list[Job]:
        # jobs of one request share one TaskRequest: the core's per-request caches then
        # find it by identity instead of comparing requests field by field
        requests: dict[TaskRequest, TaskRequest] = {}
        built = [j.build(requests) for j in self.jobs]
        refs = self.ids_by_reference()
        return [
            dataclasses.replace(
                job,
                after=tuple(dataclasses.replace(d, job=refs.get(d.job, d.job)) for d in job.after),
            )
            if job.after
            else job
            for job in built
        ]


def validate_jobs(data: Any, source: str = "") -> JobsSpec:
    """The validated model of a jobs document; SpecError naming every problem."""
    try:
        return JobsSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_errors(exc), source) from None


def parse_jobs(data: Any, source: str = "") -> list[Job]:
    """The jobs of a jobs document; SpecError naming every problem."""
    return validate_jobs(data, source).build()
