"""Stranded accelerators: free accelerators that their node cannot feed.

Every device is an accelerator here (GPU, FPGA, NPU, ...). One is **stranded** when it is
healthy and wholly free but its node lacks the CPU or the memory that the accelerator's
typical job needs beside it, so the next job that wants it cannot start there. Per node,
with ``f`` wholly free healthy accelerators, free CPU ``C``, free memory ``M`` and a typical
need of ``c`` CPU and ``m`` memory per accelerator:

    usable = min(f, floor(C / c), floor(M / m)),   stranded = f - usable

The typical need is given per device class or ``class/model`` (:class:`Typical`; the more
specific key wins), and defaults to the node's proportional share: its CPU and memory
divided by its healthy accelerators (8 GPUs, 64 cores and 512 GiB feed each GPU 8 cores and
64 GiB). A node with several kinds needs the mean of its accelerators' needs per accelerator.

``stranded %`` = stranded / healthy accelerators of the active nodes. Two ways to get it,
with the same per-node rule: :func:`stranded_accelerators` from a cluster state (vectorized;
for ``hetsched place``, a ``/metrics`` gauge, tests), and :class:`StrandingMeter`, which a
driver updates placement by placement in O(1) (the simulator samples it after every step).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import ClusterState
from hetsched.model.device import SHARE_UNITS, Health, Node

__all__ = [
    "StrandedReport",
    "StrandingMeter",
    "Typical",
    "node_needs",
    "stranded_accelerators",
    "stranded_count",
    "whole_free",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Typical:
    """CPU (millicores) and memory (MiB) the typical job of one accelerator needs with it."""

    cpu_milli: int
    memory_mib: int


#: ``class`` or ``class/model`` -> the typical need of one such accelerator
Typicals = Mapping[str, Typical]


def _lookup(typical: Typicals, device_class: str, model: str) -> Typical | None:
    return typical.get(f"{device_class}/{model}") or typical.get(device_class)


def stranded_count(free: Any, cpu_free: Any, mem_free: Any, need_cpu: Any, need_mem: Any) -> Any:
    """``f - min(f, C // c, M // m)`` elementwise (arrays or scalars); a need of 0 never
    limits, and negative free capacity (overcommit) feeds nothing."""
    free_a = np.asarray(free, dtype=np.float64)
    by_cpu = np.where(
        np.asarray(need_cpu) > 0,
        np.floor(np.maximum(cpu_free, 0) / np.maximum(need_cpu, 1e-9)),
        np.inf,
    )
    by_mem = np.where(
        np.asarray(need_mem) > 0,
        np.floor(np.maximum(mem_free, 0) / np.maximum(need_mem, 1e-9)),
        np.inf,
    )
    usable = np.minimum(free_a, np.minimum(by_cpu, by_mem))
    return (free_a - usable).astype(np.int64)


def _stranded_one(free: int, cpu_free: int, mem_free: int, need_cpu: float, need_mem: float) -> int:
    """:func:`stranded_count` for one node, in plain Python (the meter's hot path)."""
    usable = free
    if need_cpu > 0:
        usable = min(usable, int(max(cpu_free, 0) // need_cpu))
    if need_mem > 0:
        usable = min(usable, int(max(mem_free, 0) // need_mem))
    return free - usable


def _key(typical: Typicals | None) -> tuple[tuple[str, int, int], ...]:
    return tuple(sorted((k, v.cpu_milli, v.memory_mib) for k, v in (typical or {}).items()))


def node_needs(
    state: ClusterState, typical: Typicals | None = None
) -> tuple[FloatArray, FloatArray]:
    """Per node row: (CPU, memory) one of its accelerators needs beside it. Cached until the
    topology or health changes."""

    def compute() -> tuple[FloatArray, FloatArray]:
        healthy = state.dev_healthy & state.active[:, None] & (state.dev_kind >= 0)
        count = healthy.sum(axis=1)
        share_cpu = state.cpu_cap / np.maximum(count, 1)
        share_mem = state.mem_cap / np.maximum(count, 1)
        table = typical or {}
        kind_cpu = np.full(len(state.kinds) + 1, np.nan)
        kind_mem = np.full(len(state.kinds) + 1, np.nan)
        for index, kind in enumerate(state.kinds):
            need = _lookup(table, kind.device_class, kind.model)
            if need is not None:
                kind_cpu[index], kind_mem[index] = need.cpu_milli, need.memory_mib
        slot_cpu = np.where(
            np.isnan(kind_cpu[state.dev_kind]), share_cpu[:, None], kind_cpu[state.dev_kind]
        )
        slot_mem = np.where(
            np.isnan(kind_mem[state.dev_kind]), share_mem[:, None], kind_mem[state.dev_kind]
        )
        denominator = np.maximum(count, 1)
        need_cpu = np.where(healthy, slot_cpu, 0.0).sum(axis=1) / denominator
        need_mem = np.where(healthy, slot_mem, 0.0).sum(axis=1) / denominator
        return np.asarray(need_cpu, np.float64), np.asarray(need_mem, np.float64)

    return state.memo(("stranding_needs", _key(typical)), compute)


def accelerators(state: ClusterState) -> IntArray:
    """Healthy accelerators per node row (0 for inactive nodes)."""
    return state.memo(
        "stranding_accelerators",
        lambda: np.asarray(
            (state.dev_healthy & (state.dev_kind >= 0)).sum(axis=1) * state.active, np.int64
        ),
    )


def whole_free(state: ClusterState, rows: IntArray | None = None) -> IntArray:
    """Wholly free healthy accelerators per node row (of ``rows``, default all; 0 for
    inactive nodes). The state keeps the count in step with every allocate and release."""
    if rows is None:
        return np.asarray(state.dev_whole_free * state.active, np.int64)
    return np.asarray(state.dev_whole_free[rows] * state.active[rows], np.int64)


@dataclass(frozen=True, slots=True)
class StrandedReport:
    """Stranded accelerators of a cluster at one moment."""

    stranded: int
    accelerators: int
    free: int
    #: node -> its stranded accelerators, only nodes with some
    by_node: dict[str, int] = field(default_factory=dict)

    @property
    def fraction(self) -> float:
        return self.stranded / self.accelerators if self.accelerators else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "stranded": self.stranded,
            "accelerators": self.accelerators,
            "free": self.free,
            "percent": round(100 * self.fraction, 3),
            "by_node": self.by_node,
        }


def stranded_accelerators(state: ClusterState, typical: Typicals | None = None) -> StrandedReport:
    """Stranded accelerators of every active node of ``state`` (see the module docstring)."""
    need_cpu, need_mem = node_needs(state, typical)
    free = whole_free(state)
    counts = stranded_count(free, state.cpu_free, state.mem_free, need_cpu, need_mem)
    counts = np.where(state.active, counts, 0)
    by_node = {state.nodes[r].name: int(counts[r]) for r in np.flatnonzero(counts)}
    return StrandedReport(
        int(counts.sum()), int(accelerators(state).sum()), int(free.sum()), by_node
    )


@dataclass(slots=True)
class _NodeBook:
    cpu_free: int
    mem_free: int
    need_cpu: float
    need_mem: float
    #: device id -> (free share, healthy)
    devices: dict[str, list[Any]]
    stranded: int = 0

    def whole_free(self) -> int:
        return sum(1 for free, healthy in self.devices.values() if healthy and free >= SHARE_UNITS)

    def healthy(self) -> int:
        return sum(1 for _, healthy in self.devices.values() if healthy)


class StrandingMeter:
    """Stranded accelerators kept up to date placement by placement, in O(devices of the
    node) per change. The driver reports every allocation and release (``use``), node
    arrival and removal, and device health; ``fraction`` is then the current stranded %.
    The needs are fixed per node when it is added (proportional share by default)."""

    def __init__(self, nodes: Iterable[Node] = (), typical: Typicals | None = None) -> None:
        self._typical = dict(typical or {})
        self._books: dict[str, _NodeBook] = {}
        self._device_node: dict[str, str] = {}
        self.stranded = 0
        self.accelerators = 0
        for node in nodes:
            self.add_node(node)

    @property
    def fraction(self) -> float:
        return self.stranded / self.accelerators if self.accelerators else 0.0

    def add_node(self, node: Node) -> None:
        healthy = [d for d in node.devices if d.health is Health.HEALTHY]
        count = max(len(healthy), 1)
        needs = [_lookup(self._typical, d.device_class, d.model) for d in healthy]
        need_cpu = sum(n.cpu_milli if n else node.cpu_milli / count for n in needs) / count
        need_mem = sum(n.memory_mib if n else node.memory_mib / count for n in needs) / count
        devices = {d.id: [SHARE_UNITS, d.health is Health.HEALTHY] for d in node.devices}
        book = _NodeBook(node.cpu_milli, node.memory_mib, need_cpu, need_mem, devices)
        self._books[node.name] = book
        for device in node.devices:
            self._device_node[device.id] = node.name
        self.accelerators += book.healthy()
        self._refresh(book)

    def remove_node(self, name: str) -> None:
        book = self._books.pop(name, None)
        if book is None:
            return
        self.stranded -= book.stranded
        self.accelerators -= book.healthy()
        for device_id in book.devices:
            self._device_node.pop(device_id, None)

    def set_health(self, device_id: str, healthy: bool) -> None:
        name = self._device_node.get(device_id)
        if name is None:
            return
        book = self._books[name]
        entry = book.devices[device_id]
        if entry[1] != healthy:
            entry[1] = healthy
            self.accelerators += 1 if healthy else -1
            self._refresh(book)

    def use(self, placement: Placement, sign: int = 1) -> None:
        """Account ``placement`` as allocated (``sign`` 1) or released (-1)."""
        book = self._books.get(placement.node)
        if book is None:
            return
        book.cpu_free -= sign * placement.cpu_milli
        book.mem_free -= sign * placement.memory_mib
        for share in placement.devices:
            entry = book.devices.get(share.device_id)
            if entry is not None:
                entry[0] -= sign * share.share
        self._refresh(book)

    def _refresh(self, book: _NodeBook) -> None:
        count = int(
            stranded_count(
                book.whole_free(), book.cpu_free, book.mem_free, book.need_cpu, book.need_mem
            )
        )
        self.stranded += count - book.stranded
        book.stranded = count
