"""Who holds what: resource usage per job, user and queue, in flavor units.

A *flavor* is a dimension of usage: ``cpu`` (millicores), ``memory`` (MiB), a device class
(``gpu``, milli-units of a device, 1000 = one device) and a device class with its model
(``gpu/A100``). A device share counts under both its class and its class/model, so quotas and
fair shares can speak of "GPUs" and of "A100s".

The ledger is charged when the core allocates a task's resources (binding, a gang hold)
and refunded when it releases them, so it always equals what the cluster state holds per key.

Usage is a measure of the cluster (what its allocation keys hold, against its capacity), so
it lives beside the cluster state: the queue's orderings (drf, fairshare) and the scheduler
both read it, and neither has to import the other for it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocKey, ClusterState
from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import Job, TaskRequest

__all__ = [
    "DecayedUsage",
    "Ledger",
    "UnitScale",
    "Usage",
    "capacity",
    "dominant_share",
    "placement_usage",
    "request_usage",
]

#: flavor -> amount in internal units
Usage = Counter[str]

#: device model -> what one unit of a device of that model counts in its class flavor
#: (fair shares in reference-device units: scheduler/units.py); None: 1 everywhere
UnitScale = Callable[[str], float]


def placement_usage(
    state: ClusterState, placement: Placement, scale: UnitScale | None = None
) -> Usage:
    """What one task's placement holds, per flavor (device model read from the cluster).
    With ``scale``, a device share counts ``scale(model)`` times under its class flavor
    (rounded to a milli-unit); its ``class/model`` flavor always counts the share itself."""
    # filled as a plain dict would be: Counter's own constructor and ``+=`` (through
    # __missing__) cost more than the rest, once per placement
    usage = _counter({"cpu": placement.cpu_milli, "memory": placement.memory_mib})
    for share in placement.devices:
        device = state.device_of(share.device_id)
        amount = share.share if scale is None else round(share.share * scale(device.model))
        flavor = device.device_class
        usage[flavor] = usage.get(flavor, 0) + amount
        flavor = f"{flavor}/{device.model}"
        usage[flavor] = usage.get(flavor, 0) + share.share
    return usage


def request_usage(job: Job, tasks: int, scale: float = 1.0) -> Usage:
    """What ``tasks`` tasks of ``job`` ask for before placement: cpu, memory and device class
    of the first alternative of each device request (the model is known only once placed).
    ``scale`` multiplies the device amounts: the least a device unit can count for the job
    wherever it lands, so a check on this usage never refuses what a placement would pass."""
    if job.groups:
        # a job with groups: its last ``tasks`` tasks (a partial hold places the first)
        usage: Usage = Counter()
        left = tasks
        for group in reversed(job.groups):
            take = min(left, group.replicas)
            usage.update(_request_usage(group.resources, take, scale))
            left -= take
        return usage
    return _request_usage(job.resources, tasks, scale)


def _request_usage(request: TaskRequest, tasks: int, scale: float) -> Usage:
    usage: Usage = Counter({"cpu": request.cpu_milli * tasks, "memory": request.memory_mib * tasks})
    for device_request in request.devices:
        choice = device_request.primary
        amount = choice.count * min(choice.share, SHARE_UNITS) * tasks
        usage[choice.device_class] += amount if scale == 1.0 else math.floor(amount * scale)
    return usage


def capacity(state: ClusterState) -> Mapping[str, int]:
    """Total capacity per flavor of the active, healthy cluster (cached per state version)."""

    def compute() -> dict[str, int]:
        out: dict[str, int] = {
            "cpu": int(state.cpu_cap[state.active].sum()),
            "memory": int(state.mem_cap[state.active].sum()),
        }
        usable = state.dev_healthy & state.active[:, None]
        for row, kind in enumerate(state.kinds):
            count = int((usable & (state.dev_kind == row)).sum()) * SHARE_UNITS
            out[kind.device_class] = out.get(kind.device_class, 0) + count
            model = f"{kind.device_class}/{kind.model}"
            out[model] = out.get(model, 0) + count
        return out

    result: dict[str, int] = state.memo("flavor_capacity", compute)
    return result


def dominant_share(usage: Mapping[str, float], total: Mapping[str, int]) -> float:
    """The largest share of cluster capacity over all flavors (DRF's dominant share)."""
    best = 0.0
    for flavor, amount in usage.items():
        cap = total.get(flavor, 0)
        if amount > 0 and cap > 0:
            best = max(best, amount / cap)
    return best


@dataclass(slots=True)
class DecayedUsage:
    """Usage integrated over time with exponential decay (Slurm's fair-share half-life).

    ``value[e]`` is the integral of ``rate_e(s) * 2**(-(t - s) / half_life_s)`` ds, where the
    rate is the entity's dominant share of the cluster; it is exact for rates that are
    constant between two calls of :meth:`advance`, which the core makes before each batch of
    events.
    """

    half_life_s: float
    value: dict[str, float] = field(default_factory=dict)
    last: float | None = None

    def advance(self, now: float, rates: Mapping[str, float]) -> None:
        if self.last is None or now <= self.last:
            self.last = now if self.last is None else self.last
            return
        dt = now - self.last
        decay = 2.0 ** (-dt / self.half_life_s)
        # integral of a constant rate over [last, now] with decay to now
        gain = self.half_life_s / math.log(2) * (1.0 - decay)
        for entity in set(self.value) | set(rates):
            self.value[entity] = self.value.get(entity, 0.0) * decay + rates.get(entity, 0.0) * gain
        self.last = now


def _counter(amounts: Mapping[str, int]) -> Usage:
    """``Counter(amounts)`` without Counter's constructor, whose type checks cost more than
    the copy (a Counter is a dict and needs nothing else set up); for the placement path."""
    usage: Usage = Counter.__new__(Counter)
    dict.update(usage, amounts)
    return usage


def _add(book: dict[str, Usage], name: str, usage: Usage) -> None:
    """``book[name] += usage``: what Counter.update does, without its per-call type checks
    (three times per placement)."""
    held = book.get(name)
    if held is None:
        book[name] = _counter(usage)
        return
    get = held.get
    for flavor, amount in usage.items():
        held[flavor] = get(flavor, 0) + amount


class Ledger:
    """Usage held per allocation key, summed per job, user and leaf queue."""

    def __init__(self) -> None:
        self.by_key: dict[AllocKey, tuple[Job, Usage]] = {}
        self.by_job: dict[str, Usage] = {}
        self.by_user: dict[str, Usage] = {}
        self.by_queue: dict[str, Usage] = {}
        #: grows on every change, so readers can cache derived values
        self.version = 0
        #: per (book, name): grows on every change of that user's or queue's usage
        self._stamps: dict[tuple[str, str], int] = {}
        self.trackers: list[tuple[str, DecayedUsage]] = []

    def stamp(self, by: str, name: str) -> int:
        """A number that changes whenever the usage of user (``by="user"``) or queue
        ``name`` changes, so readers cache values derived from one entity's usage."""
        return self._stamps.get((by, name), 0)

    def _touch(self, job: Job) -> None:
        self.version += 1
        stamps = self._stamps
        stamps[("user", job.user)] = self.version
        stamps[("queue", job.queue)] = self.version

    def charge(self, key: AllocKey, job: Job, usage: Usage) -> None:
        self.by_key[key] = (job, usage)
        _add(self.by_job, job.id, usage)
        _add(self.by_user, job.user, usage)
        _add(self.by_queue, job.queue, usage)
        self._touch(job)

    def refund(self, key: AllocKey) -> None:
        entry = self.by_key.pop(key, None)
        if entry is None:
            return
        job, usage = entry
        for book, name in (
            (self.by_job, job.id),
            (self.by_user, job.user),
            (self.by_queue, job.queue),
        ):
            held = book[name]
            held.subtract(usage)
            if not any(held.values()):
                del book[name]
        self._touch(job)

    def track(self, by: str, half_life_s: float) -> DecayedUsage:
        """A decayed-usage integral per user (``by="user"``) or queue, kept up to date."""
        tracker = DecayedUsage(half_life_s)
        self.trackers.append((by, tracker))
        return tracker

    def advance(self, now: float, state: ClusterState) -> None:
        """Integrate usage up to ``now``; called before the events of ``now`` change it."""
        if not self.trackers:
            return
        total = capacity(state)
        for by, tracker in self.trackers:
            book = self.by_user if by == "user" else self.by_queue
            rates = {name: dominant_share(usage, total) for name, usage in book.items()}
            tracker.advance(now, rates)
