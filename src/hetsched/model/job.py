"""Jobs and what their tasks ask for."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hetsched.model.checkpoint import Checkpointing
from hetsched.model.device import SHARE_UNITS, TaintEffect
from hetsched.model.quantity import format_cpu, format_memory
from hetsched.model.speed import NO_SPEED, JobSpeed
from hetsched.model.topology import TopologyRequest
from hetsched.model.workflow import ArraySpec, Dependency, OnUnmet, element_id

__all__ = [
    "Checkpointing",
    "DeviceChoice",
    "DeviceFailurePolicy",
    "DeviceRequest",
    "Job",
    "ResizeMode",
    "RestartPolicy",
    "TaskGroup",
    "TaskRequest",
    "Toleration",
]


@dataclass(frozen=True, slots=True)
class DeviceChoice:
    """One way to satisfy a device request: ``count`` devices of ``device_class``.

    ``share`` is the milli-units taken on each device; it is below 1000 only when
    ``count`` is 1 (a fraction of one device, as in the Alibaba trace). ``selector`` is a CEL
    expression over ``device.attributes`` (Kubernetes DRA syntax), or None for any device.
    """

    device_class: str
    count: int = 1
    share: int = SHARE_UNITS
    selector: str | None = None

    @property
    def whole(self) -> bool:
        return self.share >= SHARE_UNITS

    def describe(self) -> str:
        amount = f"{self.count}x {self.device_class}"
        if not self.whole:
            amount = f"{self.share}/{SHARE_UNITS} of 1 {self.device_class}"
        return amount + (f" where {self.selector}" if self.selector else "")


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """A device request: ordered alternatives, the first that fits a node wins there.

    A request without alternatives has exactly one choice. This follows Kubernetes DRA's
    ``firstAvailable``.
    """

    choices: tuple[DeviceChoice, ...]

    def __post_init__(self) -> None:
        if not self.choices:
            raise ValueError("a device request needs at least one choice")

    @classmethod
    def of(
        cls,
        device_class: str,
        count: int = 1,
        share: int = SHARE_UNITS,
        selector: str | None = None,
    ) -> DeviceRequest:
        return cls((DeviceChoice(device_class, count, share, selector),))

    @property
    def primary(self) -> DeviceChoice:
        return self.choices[0]


@dataclass(frozen=True, slots=True)
class Toleration:
    """Tolerates taints with ``key`` (any key when empty) and, if set, ``value`` and ``effect``."""

    key: str = ""
    value: str | None = None
    effect: TaintEffect | None = None

    def tolerates(self, key: str, value: str, effect: TaintEffect) -> bool:
        if self.key and self.key != key:
            return False
        if self.value is not None and self.value != value:
            return False
        return self.effect is None or self.effect == effect


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """What one task (replica) of a job needs: CPU in millicores, memory in MiB, devices."""

    cpu_milli: int = 0
    memory_mib: int = 0
    devices: tuple[DeviceRequest, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    tolerations: tuple[Toleration, ...] = ()
    #: computed once: requests are hashed on the hot path (per-cycle caches key on them)
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        if not isinstance(self.node_selector, MappingProxyType):
            object.__setattr__(self, "node_selector", MappingProxyType(dict(self.node_selector)))
        key = (
            self.cpu_milli,
            self.memory_mib,
            self.devices,
            tuple(sorted(self.node_selector.items())),
            self.tolerations,
        )
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash

    def describe(self) -> str:
        """``cpu 2, memory 16Gi, 1x gpu``: the units a job file is written in, not the
        millicores and MiB the core counts in (``cpu 2000m, memory 16384Mi``)."""
        parts = [f"cpu {format_cpu(self.cpu_milli)}", f"memory {format_memory(self.memory_mib)}"]
        parts += [" or ".join(c.describe() for c in d.choices) for d in self.devices]
        return ", ".join(parts)


class RestartPolicy(enum.StrEnum):
    NEVER = "never"
    ON_FAILURE = "on_failure"


class DeviceFailurePolicy(enum.StrEnum):
    """What happens to a running job when a device (or node) under it goes away or fails.

    ``requeue``: back in the queue, to start from scratch; ``checkpoint``: back in the queue,
    to resume from the last checkpoint a task reported (from scratch without one); ``fail``:
    the job fails.
    """

    REQUEUE = "requeue"
    CHECKPOINT = "checkpoint"
    FAIL = "fail"


class ResizeMode(enum.StrEnum):
    """How an elastic job changes its count while it runs: ``checkpoint`` (a notice, a
    checkpoint, then every task starts again at the new count) or ``live`` (surviving tasks
    keep running and are told the new count; new ranks start, removed ranks stop)."""

    CHECKPOINT = "checkpoint"
    LIVE = "live"


@dataclass(frozen=True, slots=True)
class TaskGroup:
    """One group of a heterogeneous job: ``replicas`` tasks that each ask for ``resources``.
    The job's tasks are numbered across its groups in order: the first group's are 0, 1, ...
    """

    name: str
    replicas: int
    resources: TaskRequest


@dataclass(frozen=True, slots=True)
class Job:
    """A unit of work: ``replicas`` identical tasks, bound all-or-nothing in groups of ``gang``.

    Times are seconds on the driver's clock. ``gang`` defaults to ``replicas``: the job starts
    only when that many tasks can be placed at once.

    An *elastic* job (``min_replicas`` set) runs with any count from ``min_replicas`` to
    ``replicas``: it starts with the largest count that fits, grows on idle capacity and is
    shrunk before anyone is evicted (see ``docs/elastic.md``). A *heterogeneous* job
    (``groups``) has several task groups, each with its own request, placed all or nothing
    as one gang; ``replicas`` is then the groups' total and ``resources`` the first group's.
    """

    id: str
    resources: TaskRequest
    name: str = ""
    user: str = "default"
    queue: str = "default"
    priority: int = 0
    replicas: int = 1
    gang: int | None = None
    preemptible: bool = True
    estimated_runtime_s: float | None = None
    max_runtime_s: float | None = None
    restart_policy: RestartPolicy = RestartPolicy.NEVER
    max_restarts: int = 0
    submit_time: float = 0.0
    on_device_failure: DeviceFailurePolicy = DeviceFailurePolicy.REQUEUE
    #: may run on oversubscribed capacity (the profile's ``overcommit``), and is the first
    #: to be killed when the node runs short
    best_effort: bool = False
    #: how fast the job runs per device model and how much work it has (see
    #: :mod:`hetsched.model.speed`); empty: every model is equal
    speed: JobSpeed = field(default_factory=lambda: NO_SPEED)
    #: how it saves its state (see :mod:`hetsched.model.checkpoint`); None: it does not,
    #: so a stop loses its run's work and it gets no notice
    checkpoint: Checkpointing | None = None
    #: may be moved while it runs (migration) or stopped to take turns (a round policy).
    #: False for work its driver cannot start again elsewhere once stopped (a Kubernetes
    #: pod that no controller recreates): the core never chooses it to move or to yield
    movable: bool = True
    #: jobs it waits for (see :mod:`hetsched.model.workflow`): it is held, outside the
    #: queue, until every one has ended as it needs
    after: tuple[Dependency, ...] = ()
    #: what becomes of it when a dependency can no longer be met
    on_unmet: OnUnmet = OnUnmet.CANCEL
    #: an array: this job is the record of its elements, which are created as they may run
    array: ArraySpec | None = None
    #: an element of an array: the array's id and this element's index
    array_of: str | None = None
    array_index: int | None = None
    #: elastic: the fewest tasks it runs with (None: it runs with ``replicas`` exactly)
    min_replicas: int | None = None
    #: how an elastic job is resized while it runs
    resize: ResizeMode = ResizeMode.CHECKPOINT
    #: heterogeneous: its task groups, in task order (empty: ``replicas`` alike tasks)
    groups: tuple[TaskGroup, ...] = ()
    #: where its tasks go in the network (see :mod:`hetsched.model.topology`); None: anywhere
    topology: TopologyRequest | None = None

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"job {self.id}: replicas must be >= 1, got {self.replicas}")
        if self.gang is not None and not 1 <= self.gang <= self.replicas:
            raise ValueError(f"job {self.id}: gang must be 1..replicas, got {self.gang}")
        if self.min_replicas is not None:
            if not 1 <= self.min_replicas <= self.replicas:
                raise ValueError(
                    f"job {self.id}: min_replicas must be 1..replicas, got {self.min_replicas}"
                )
            if self.gang is not None or self.groups:
                raise ValueError(f"job {self.id}: min_replicas excludes gang and groups")
        if self.groups:
            total = sum(g.replicas for g in self.groups)
            if total != self.replicas or self.gang not in (None, self.replicas):
                raise ValueError(
                    f"job {self.id}: a job with groups has replicas {total} (their sum) and "
                    "no smaller gang"
                )
        size = None if self.topology is None else self.topology.slice_size
        if size is not None and self.replicas % size:
            raise ValueError(f"job {self.id}: replicas must be a multiple of slice_size {size}")

    def element(self, index: int) -> Job:
        """Element ``index`` of this array: the same job with its own id and name."""
        return dataclasses.replace(
            self,
            id=element_id(self.id, index),
            name=f"{self.name or self.id}[{index}]",
            after=(),
            array=None,
            array_of=self.id,
            array_index=index,
        )

    @property
    def gang_min(self) -> int:
        if self.min_replicas is not None:
            return self.min_replicas
        return self.replicas if self.gang is None else self.gang

    @property
    def elastic(self) -> bool:
        return self.min_replicas is not None and self.min_replicas < self.replicas

    def group_of(self, task: int) -> tuple[TaskGroup, int] | None:
        """The group of task ``task`` and its index in it; None for a job without groups."""
        for group in self.groups:
            if task < group.replicas:
                return group, task
            task -= group.replicas
        return None

    def request_of(self, task: int) -> TaskRequest:
        """What task ``task`` asks for (its group's request, or the job's)."""
        if not self.groups:
            return self.resources
        found = self.group_of(task)
        return self.resources if found is None else found[0].resources

    @property
    def notice_s(self) -> float:
        """Seconds of notice it gets before it is stopped (0 unless it checkpoints)."""
        return 0.0 if self.checkpoint is None else self.checkpoint.notice_s
