"""Columnar cluster state: free capacity as numpy arrays, one per dimension.

Rows are nodes; device slots are a padded matrix ``[node, slot]`` (a node with fewer devices
than the widest node has absent slots). Filters and scores read these arrays for all nodes
at once. Every mutation goes through :meth:`ClusterState.allocate` and
:meth:`ClusterState.release`, which check first and change nothing when they refuse, so
capacity is never exceeded, never negative, and release gives back exactly what was taken.

What the state reads without changing it (names to rows, device masks, the memo of
topology-derived values) is :class:`~hetsched.cluster.views.TopologyViews`; the logs of
which rows changed since a moment, for caches kept outside, are
:class:`~hetsched.cluster.changes.ChangeLog`. Both are bases of :class:`ClusterState`.

Allocation keys are :class:`~hetsched.keys.TaskKey` for the tasks of jobs, or strings
``<job id>/<label>`` for what-if placements on forks (backfill, preemption trials) and
replays that have no runs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from hetsched.cluster.batch import first_duplicate, slot_writes
from hetsched.cluster.changes import ChangeLog
from hetsched.cluster.kinds import DeviceKind, kind_of
from hetsched.cluster.network import Network
from hetsched.cluster.placement import Placement
from hetsched.cluster.views import TopologyViews
from hetsched.keys import TaskKey
from hetsched.model.device import SHARE_UNITS, Device, Health, Node, Taint

__all__ = ["AllocKey", "AllocationError", "ClusterState", "DeviceKind"]

#: what an allocation is held under (see the module docstring)
AllocKey = TaskKey | str

BoolArray = npt.NDArray[np.bool_]
_A = TypeVar("_A", bound=npt.NDArray[Any])
_T = TypeVar("_T")
IntArray = npt.NDArray[np.int64]
#: device-slot matrices are int32 and column-major (Fortran order): per-node reductions over
#: slots then run as a few contiguous column passes, about 5x faster than row-major
SlotArray = npt.NDArray[np.int32]


class AllocationError(RuntimeError):
    """An allocate or release that would break the capacity invariants; nothing changed."""


class ClusterState(TopologyViews, ChangeLog):
    """Free and total capacity of every node and device slot, with index maps.

    Node rows are never reused: a removed node keeps its row with ``active`` False, so row
    numbers held by callers stay valid.
    """

    def __init__(self, nodes: Iterable[Node] = ()) -> None:
        self.nodes: list[Node] = []
        self.node_index: dict[str, int] = {}
        #: device id -> (node row, slot)
        self.device_index: dict[str, tuple[int, int]] = {}
        self.kinds: list[DeviceKind] = []
        self._kind_index: dict[DeviceKind, int] = {}
        self.cpu_cap: IntArray = np.zeros(0, np.int64)
        self.cpu_free: IntArray = np.zeros(0, np.int64)
        self.mem_cap: IntArray = np.zeros(0, np.int64)
        self.mem_free: IntArray = np.zeros(0, np.int64)
        self.active: BoolArray = np.zeros(0, np.bool_)
        #: free share per device slot, 0..1000; 0 for absent slots
        self.dev_free: SlotArray = np.zeros((0, 0), np.int32, order="F")
        #: kind row per slot, -1 for absent slots
        self.dev_kind: SlotArray = np.zeros((0, 0), np.int32, order="F")
        self.dev_healthy: BoolArray = np.zeros((0, 0), np.bool_, order="F")
        #: per node: free share summed over healthy slots (kept in step with dev_free)
        self.dev_free_total: IntArray = np.zeros(0, np.int64)
        #: per node: healthy slots wholly free (kept in step with dev_free, like the total)
        self.dev_whole_free: IntArray = np.zeros(0, np.int64)
        self.allocations: dict[AllocKey, Placement] = {}
        #: counts allocations and releases, so a cache of per-row values knows which rows
        #: changed since it was filled: ``row_tick`` is the count at each row's last change;
        #: with the logs of the latest changes and of growth (hetsched.cluster.changes)
        self.tick = 0
        self.row_tick: IntArray = np.zeros(0, np.int64)
        self._start_log(0, 0)
        #: oversubscription for best-effort work (the profile's ``overcommit``): per node,
        #: free CPU and memory beyond the capacity that only best-effort allocations take,
        #: first, before the capacity guaranteed work sees; (factor - 1) x capacity in all
        self.cpu_factor = 1.0
        self.mem_factor = 1.0
        self.cpu_slack: IntArray = np.zeros(0, np.int64)
        self.mem_slack: IntArray = np.zeros(0, np.int64)
        #: jobs whose allocations are best-effort
        self.best_effort_jobs: set[str] = set()
        #: best-effort allocation key -> (cpu, memory) it took from the slack
        self.slack_taken: dict[AllocKey, tuple[int, int]] = {}
        #: bumps whenever eligibility can change (nodes, health); caches key on it
        self.version = 0
        self._memo: dict[Hashable, Any] = {}
        self._memo_version = 0
        self._all_active = True
        self._all_active_version = -1
        #: the network levels (node labels, broadest first) and their domains, built on use
        self.levels: tuple[str, ...] = ()
        self._network: Network | None = None
        self.add_nodes(nodes)

    # -- shape ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def width(self) -> int:
        """Device slots per row (the most devices any node has)."""
        return int(self.dev_free.shape[1])

    def add_node(self, node: Node) -> int:
        """Add a node with all of its capacity free; returns its row."""
        return self.add_nodes([node])[0]

    def add_nodes(self, nodes: Iterable[Node]) -> list[int]:
        """Add nodes in one batch (arrays grow once); returns their rows.

        Checks every name and device id first: on a duplicate nothing is added.
        """
        batch = list(nodes)
        ids = [d.id for node in batch for d in node.devices]
        duplicate = first_duplicate(batch, ids, self._live, self.device_index)
        if duplicate is not None:
            raise ValueError(duplicate)
        first = len(self.nodes)
        count = len(batch)
        width = max([self.width, *(len(n.devices) for n in batch)])
        cpu = np.array([n.cpu_milli for n in batch], np.int64)
        mem = np.array([n.memory_mib for n in batch], np.int64)
        self.cpu_cap = np.concatenate([self.cpu_cap, cpu])
        self.cpu_free = np.concatenate([self.cpu_free, cpu])
        self.cpu_slack = np.concatenate([self.cpu_slack, _slack(cpu, self.cpu_factor)])
        self.mem_slack = np.concatenate([self.mem_slack, _slack(mem, self.mem_factor)])
        self.mem_cap = np.concatenate([self.mem_cap, mem])
        self.mem_free = np.concatenate([self.mem_free, mem])
        self.active = np.concatenate([self.active, np.ones(count, np.bool_)])
        self.dev_free = _grow(self.dev_free, count, width, 0)
        self.dev_kind = _grow(self.dev_kind, count, width, -1)
        self.dev_healthy = _grow(self.dev_healthy, count, width, False)
        self.dev_free_total = np.concatenate([self.dev_free_total, np.zeros(count, np.int64)])
        self.dev_whole_free = np.concatenate([self.dev_whole_free, np.zeros(count, np.int64)])
        self.row_tick = np.concatenate([self.row_tick, np.zeros(count, np.int64)])
        rows = range(first, first + count)
        self.nodes.extend(batch)
        self.node_index.update(zip((n.name for n in batch), rows, strict=True))
        self._fill_slots(batch, first, ids)
        added = slice(first, first + count)
        free, usable = self.dev_free[added], self.dev_healthy[added]
        # what _total computes row by row (integer sums: the same values)
        self.dev_free_total[added] = np.where(usable, free, 0).sum(axis=1)
        self.dev_whole_free[added] = ((free >= SHARE_UNITS) & usable).sum(axis=1)
        self._grown.extend(rows)
        self._network = None
        self.version += 1
        return list(rows)

    def _fill_slots(self, batch: list[Node], first: int, ids: list[str]) -> None:
        """Index the devices of ``batch`` (rows from ``first``; ``ids`` their ids in order)
        and write their slots in one go (ids are stable here: every device is alive for the
        whole batch)."""
        writes = slot_writes(batch, first, lambda device: self._kind_row(kind_of(device)))
        self.device_index.update(zip(ids, writes.where, strict=True))
        if writes.rows:
            at = (np.array(writes.rows, np.int64), np.array(writes.slots, np.int64))
            self.dev_free[at] = SHARE_UNITS
            self.dev_kind[at] = np.array(writes.kinds, np.int32)
            self.dev_healthy[at] = np.array(writes.healthy, np.bool_)

    def add_device(self, node: str, device: Device) -> int:
        """A device appears on an active node (hot-plug): it takes the node's next slot with
        all of its share free; returns the slot. Raises (nothing changed) on an unknown or
        inactive node or an id that exists. Widens the slot matrices when the node already
        has as many devices as the widest one."""
        row = self.row(node)
        if not self.active[row]:
            raise ValueError(f"node {node} is not active")
        if device.id in self.device_index:
            raise ValueError(f"device id {device.id} already exists")
        old = self.nodes[row]
        slot = len(old.devices)
        if slot >= self.width:
            self.dev_free = _grow(self.dev_free, 0, slot + 1, 0)
            self.dev_kind = _grow(self.dev_kind, 0, slot + 1, -1)
            self.dev_healthy = _grow(self.dev_healthy, 0, slot + 1, False)
        self.nodes[row] = Node(
            old.name, old.cpu_milli, old.memory_mib, (*old.devices, device), old.labels, old.taints
        )
        self.device_index[device.id] = (row, slot)
        self.dev_free[row, slot] = SHARE_UNITS
        self.dev_kind[row, slot] = self._kind_row(kind_of(device))
        self.dev_healthy[row, slot] = device.health is Health.HEALTHY
        self._total(row)
        self._grown.append(row)
        self.version += 1
        return slot

    def update_node(
        self,
        name: str,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Taint] | None = None,
    ) -> int:
        """Replace an active node's labels and/or taints (None keeps them); capacity,
        devices and allocations stay. Returns its row. Placement may now accept the node
        where it did not, so the row counts as grown."""
        row = self.row(name)
        if not self.active[row]:
            raise ValueError(f"node {name} is not active")
        old = self.nodes[row]
        self.nodes[row] = Node(
            old.name,
            old.cpu_milli,
            old.memory_mib,
            old.devices,
            old.labels if labels is None else labels,
            old.taints if taints is None else tuple(taints),
        )
        self._grown.append(row)
        self._network = None
        self.version += 1
        return row

    def remove_node(self, name: str) -> list[AllocKey]:
        """Take a node out of service; returns the allocation keys that were on it.

        The caller decides what happens to those tasks and must release them.
        """
        row = self.row(name)
        self.active[row] = False
        self.version += 1
        return [key for key, p in self.allocations.items() if p.node == name]

    def set_device_health(self, device_id: str, health: Health) -> list[AllocKey]:
        """Mark a device healthy or not; returns the allocation keys that use it."""
        row, slot = self._device(device_id)
        self.dev_healthy[row, slot] = health is Health.HEALTHY
        self._total(row)
        if health is Health.HEALTHY:
            self._grown.append(row)
        self.version += 1
        return [
            key
            for key, p in self.allocations.items()
            if any(d.device_id == device_id for d in p.devices)
        ]

    def set_overcommit(self, cpu: float, memory: float) -> None:
        """Let best-effort allocations use up to ``cpu`` (``memory``) x each node's capacity.
        Only while nothing best-effort is allocated (the driver sets it at start)."""
        if self.slack_taken:
            raise AllocationError("overcommit changes while best-effort work holds slack")
        if cpu < 1 or memory < 1:
            raise ValueError("overcommit factors are at least 1")
        self.cpu_factor, self.mem_factor = cpu, memory
        self.cpu_slack = _slack(self.cpu_cap, cpu)
        self.mem_slack = _slack(self.mem_cap, memory)
        self.version += 1

    def set_topology(self, levels: Sequence[str]) -> None:
        """The network levels: node labels, broadest first (:mod:`hetsched.model.topology`)."""
        self.levels = tuple(levels)
        self._network = None
        self.version += 1

    def network(self) -> Network | None:
        """The network domains and their free capacity; None without levels."""
        if not self.levels:
            return None
        if self._network is None:
            self._network = Network(self.levels, self.nodes)
        return self._network

    def best_effort(self, key: AllocKey) -> bool:
        if not self.best_effort_jobs:
            return False
        job = key.job if isinstance(key, TaskKey) else key.rsplit("/", 1)[0]
        return job in self.best_effort_jobs

    def _live(self, name: str) -> bool:
        """Whether an active node has this name."""
        row = self.node_index.get(name)
        return row is not None and bool(self.active[row])

    def _kind_row(self, kind: DeviceKind) -> int:
        row = self._kind_index.get(kind)
        if row is None:
            row = len(self.kinds)
            self.kinds.append(kind)
            self._kind_index[kind] = row
        return row

    # -- allocate and release ------------------------------------------------------------

    def check(self, placement: Placement, best_effort: bool = False) -> str | None:
        """Why ``placement`` cannot be allocated now, or None if it can. A best-effort
        placement may also take the node's slack (oversubscription)."""
        # scalars through ``item`` (plain ints, fewer steps): this runs at every allocation
        row = self.node_index.get(placement.node)
        if row is None:
            return f"unknown node {placement.node!r}"
        if not self.active.item(row):
            return f"node {placement.node} is not active"
        if placement.cpu_milli < 0 or placement.memory_mib < 0:
            return "negative request"
        cpu_free = self.cpu_free.item(row) + (self.cpu_slack.item(row) if best_effort else 0)
        mem_free = self.mem_free.item(row) + (self.mem_slack.item(row) if best_effort else 0)
        if placement.cpu_milli > cpu_free:
            return f"cpu: want {placement.cpu_milli}m, free {cpu_free}m"
        if placement.memory_mib > mem_free:
            return f"memory: want {placement.memory_mib}Mi, free {mem_free}Mi"
        seen: set[str] = set()
        for d in placement.devices:
            if d.device_id in seen:
                return f"device {d.device_id} listed twice"
            seen.add(d.device_id)
            where = self.device_index.get(d.device_id)
            if where is None or where[0] != row:
                return f"device {d.device_id} is not on node {placement.node}"
            if not 0 < d.share <= SHARE_UNITS:
                return f"device {d.device_id}: share must be 1..{SHARE_UNITS}, got {d.share}"
            if not self.dev_healthy.item(where):
                return f"device {d.device_id} is unhealthy"
            free = self.dev_free.item(where)
            if d.share > free:
                return f"device {d.device_id}: want {d.share}, free {free}"
        return None

    def allocate(self, key: AllocKey, placement: Placement) -> None:
        """Take ``placement`` for ``key``; raise AllocationError (no change) if it does not fit."""
        if key in self.allocations:
            raise AllocationError(f"{key} already holds an allocation")
        best_effort = self.best_effort(key)
        problem = self.check(placement, best_effort)
        if problem is not None:
            raise AllocationError(f"{key}: {problem}")
        row = self.node_index[placement.node]
        cpu, mem = placement.cpu_milli, placement.memory_mib
        if best_effort:
            # the slack first: best-effort work eats into guaranteed capacity only beyond it
            slack = (min(cpu, int(self.cpu_slack[row])), min(mem, int(self.mem_slack[row])))
            if slack != (0, 0):
                self.cpu_slack[row] -= slack[0]
                self.mem_slack[row] -= slack[1]
                self.slack_taken[key] = slack
                cpu, mem = cpu - slack[0], mem - slack[1]
        self.cpu_free[row] = self.cpu_free.item(row) - cpu
        self.mem_free[row] = self.mem_free.item(row) - mem
        if placement.devices:
            self._shares(row, placement, -1)
        self.allocations[key] = placement
        self._touched(row)
        if self._network is not None:
            self._network.touch(self, row)

    def release(self, key: AllocKey) -> Placement:
        """Give back exactly what ``key`` holds; raises AllocationError if it holds nothing."""
        placement = self.allocations.pop(key, None)
        if placement is None:
            raise AllocationError(f"{key} holds no allocation")
        row = self.node_index[placement.node]
        slack = self.slack_taken.pop(key, (0, 0))
        self.cpu_slack[row] += slack[0]
        self.mem_slack[row] += slack[1]
        self.cpu_free[row] += placement.cpu_milli - slack[0]
        self.mem_free[row] += placement.memory_mib - slack[1]
        if placement.devices:
            self._shares(row, placement, 1)
        self._grown.append(row)
        self._touched(row)
        if self._network is not None:
            self._network.touch(self, row)
        return placement

    def _shares(self, row: int, placement: Placement, sign: int) -> None:
        """Take (``sign`` -1) or give back (+1) a placement's device shares, keeping the
        row's healthy free total and whole-free count in step device by device (the same
        values :meth:`_total` computes from the row)."""
        dev_free, healthy = self.dev_free, self.dev_healthy
        total, whole = 0, 0
        for d in placement.devices:
            where = self.device_index[d.device_id]
            before = dev_free.item(where)
            after = before + sign * d.share
            dev_free[where] = after
            if healthy.item(where):
                total += after - before
                whole += (after >= SHARE_UNITS) - (before >= SHARE_UNITS)
        if total:
            self.dev_free_total[row] += total
        if whole:
            self.dev_whole_free[row] += whole

    def _total(self, row: int) -> None:
        healthy = self.dev_healthy[row]
        free = self.dev_free[row]
        self.dev_free_total[row] = int(free[healthy].sum())
        self.dev_whole_free[row] = int(((free >= SHARE_UNITS) & healthy).sum())

    def fork(self) -> ClusterState:
        """An independent copy for what-if evaluation (preemption, gangs, explanations).

        Nodes and kinds are immutable and shared; arrays and the allocation map are copied.
        """
        other = copy.copy(self)
        other.nodes = list(self.nodes)
        other.node_index = dict(self.node_index)
        other.device_index = dict(self.device_index)
        other.kinds = list(self.kinds)
        other._kind_index = dict(self._kind_index)
        other.best_effort_jobs = set(self.best_effort_jobs)
        other.slack_taken = dict(self.slack_taken)
        names = ("cpu_cap", "cpu_free", "mem_cap", "mem_free", "active", "cpu_slack", "mem_slack")
        for name in names:
            setattr(other, name, getattr(self, name).copy())
        other.dev_free = self.dev_free.copy()
        other.dev_kind = self.dev_kind.copy()
        other.dev_healthy = self.dev_healthy.copy()
        other.dev_free_total = self.dev_free_total.copy()
        other.dev_whole_free = self.dev_whole_free.copy()
        other.row_tick = self.row_tick.copy()
        other._start_log(self.tick, self.growth_mark())
        other.allocations = dict(self.allocations)
        other._memo = dict(self._memo)
        other._network = None if self._network is None else self._network.copy()
        for hook in _FORK_HOOKS:
            hook(self, other)
        return other

    @staticmethod
    def on_fork(hook: Callable[[ClusterState, ClusterState], None]) -> None:
        """Call ``hook(original, fork)`` at the end of every fork: a cache kept per state
        outside it (values derived from free capacity) starts the fork from the original's."""
        _FORK_HOOKS.append(hook)


_FORK_HOOKS: list[Callable[[ClusterState, ClusterState], None]] = []


def _slack(capacity: IntArray, factor: float) -> IntArray:
    out: IntArray = np.floor(capacity * (factor - 1.0)).astype(np.int64)
    return out


def _grow(array: _A, rows: int, width: int, fill: object) -> _A:
    """Append ``rows`` rows and widen to ``width`` slots, padding with ``fill``."""
    old_rows, old_width = array.shape
    grown = np.full((old_rows + rows, width), fill, dtype=array.dtype, order="F")
    grown[:old_rows, :old_width] = array
    return grown  # type: ignore[return-value]
