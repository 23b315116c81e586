"""The fragmentation measure of FGD (Weng et al., USENIX ATC '23), vectorized over nodes.

A target workload M is a set of task classes m with popularity p_m (summing to 1). For a
node n and a class m, the fragmented device share F_n(m), in milli-units, is:

- the node's whole idle share of the measured device class, if m asks for no device, if no
  device of n is eligible for m (model mismatch), or if n cannot host m (too little free
  CPU, or fewer than k_m eligible devices with at least d_m free);
- otherwise (m fits) the idle share of the devices m could not use: those with less than
  d_m free, plus any device its selector rules out.

F_n(M) = sum_m p_m F_n(m); the cluster's F(M) is the sum over active nodes. Memory is not
part of the measure (it is only a feasibility filter).

Everything here is pure numpy over :class:`~hetsched.cluster.state.ClusterState` arrays, with
any number of leading "what-if" axes, so FGD can evaluate every hypothetical placement of a
task on every candidate node in one call.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from hetsched.cluster.state import ClusterState
from hetsched.model.device import SHARE_UNITS

__all__ = [
    "ClusterFrag",
    "TargetClass",
    "TargetWorkload",
    "cluster_frag",
    "eligibility",
    "expected_frag",
    "expected_frag_after_share",
    "node_frag",
]

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class TargetClass:
    """One task class of the target workload.

    ``count`` devices of ``share`` milli-units each (``count`` 0: a task without devices;
    ``share`` below 1000 only when ``count`` is 1); ``selector`` restricts the eligible
    devices (a CEL expression, None for any); ``weight`` is the popularity, any positive
    scale (the workload normalises).
    """

    cpu_milli: int
    count: int
    share: int
    selector: str | None
    weight: float

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.count < 0 or not 0 <= self.share <= SHARE_UNITS:
            raise ValueError(f"invalid target class {self}")
        if self.count and self.share == 0:
            raise ValueError(f"target class with {self.count} devices of share 0")
        if self.weight <= 0:
            raise ValueError(f"target class weight must be positive, got {self.weight}")


@dataclass(frozen=True, slots=True, eq=False)
class TargetWorkload:
    """The target workload as arrays over its K classes (weights sum to 1)."""

    classes: tuple[TargetClass, ...]
    cpu: IntArray
    count: IntArray
    share: IntArray
    weight: FloatArray

    @classmethod
    def of(cls, classes: Iterable[TargetClass]) -> TargetWorkload:
        items = tuple(classes)
        if not items:
            raise ValueError("a target workload needs at least one class")
        weight = np.array([c.weight for c in items], np.float64)
        return cls(
            items,
            np.array([c.cpu_milli for c in items], np.int64),
            np.array([c.count for c in items], np.int64),
            # a class without devices needs no free share; 0 keeps it out of "g >= d" sums
            np.array([c.share if c.count else 0 for c in items], np.int64),
            weight / weight.sum(),
        )

    @property
    def selectors(self) -> tuple[str | None, ...]:
        return tuple(c.selector for c in self.classes)

    def __len__(self) -> int:
        return len(self.classes)


def eligibility(state: ClusterState, target: TargetWorkload, device_class: str) -> BoolArray:
    """Per class, the slots it may use: shape (K, nodes, slots); cached per cluster version."""
    selectors = target.selectors
    return state.memo(
        ("frag-eligibility", device_class, selectors),
        lambda: np.stack([state.device_mask(device_class, s) for s in selectors]),
    )


def node_frag(
    cpu: npt.NDArray[Any],
    free: npt.NDArray[Any],
    slots: npt.NDArray[np.bool_],
    elig: npt.NDArray[np.bool_],
    target: TargetWorkload,
) -> FloatArray:
    """F_n(m) for every class: shape (K, *cpu.shape), in milli-units.

    ``cpu`` has any shape B; ``free`` and ``slots`` (the measured devices: class, healthy,
    active) have shape (*B, S); ``elig`` has shape (K, *B, S) or broadcasts to it.
    """
    g = np.where(slots, free, 0)
    idle = g.sum(axis=-1)
    shape = (len(target),) + (1,) * g.ndim
    share = target.share.reshape(shape)
    usable = elig & slots & (g >= share)  # (K, *B, S)
    fits = usable.sum(axis=-1) >= target.count.reshape(shape[:-1])
    fits &= cpu >= target.cpu.reshape(shape[:-1])
    fits &= (target.count > 0).reshape(shape[:-1])
    usable_share = np.where(usable, g, 0).sum(axis=-1)
    return np.asarray(np.where(fits, idle - usable_share, idle), np.float64)


def expected_frag(
    cpu: npt.NDArray[Any],
    free: npt.NDArray[Any],
    slots: npt.NDArray[np.bool_],
    elig: npt.NDArray[np.bool_],
    target: TargetWorkload,
) -> FloatArray:
    """F_n(M) = sum_m p_m F_n(m), shape ``cpu.shape`` (see :func:`node_frag` for shapes)."""
    per_class = node_frag(cpu, free, slots, elig, target)
    return np.tensordot(target.weight, per_class, axes=1)


def expected_frag_after_share(
    cpu_after: npt.NDArray[Any],
    free: npt.NDArray[Any],
    slots: npt.NDArray[np.bool_],
    elig: npt.NDArray[np.bool_],
    target: TargetWorkload,
    share: int,
) -> FloatArray:
    """F_n(M) after ``share`` is taken from one slot, for every slot in turn: shape (N, S).

    ``cpu_after`` (N,) is the free CPU after placement; ``free`` and ``slots`` are (N, S),
    ``elig`` (K, N, S). Equal to :func:`expected_frag` over the N x S what-if states (slot s
    of row n less ``share``), but computed from each slot's change to the per-class counts
    and sums instead of re-reducing every what-if state: O(K N S), not O(K N S^2). Values
    for slots with less than ``share`` free (or absent) are meaningless.
    """
    g = np.where(slots, free, 0).astype(np.int64)
    shape = (len(target), 1, 1)
    need = target.share.reshape(shape)
    eligible = elig & slots
    usable = eligible & (g >= need)  # (K, N, S)
    usable_count = usable.sum(axis=-1, keepdims=True)
    usable_share = np.where(usable, g, 0).sum(axis=-1, keepdims=True)
    taken = g - share
    usable_after = eligible & (taken >= need)
    count_after = usable_count - usable + usable_after
    share_after = usable_share - np.where(usable, g, 0) + np.where(usable_after, taken, 0)
    idle_after = g.sum(axis=-1, keepdims=True) - share  # (N, 1)
    fits = count_after >= target.count.reshape(shape)
    fits &= cpu_after[None, :, None] >= target.cpu.reshape(shape)
    fits &= (target.count > 0).reshape(shape)
    per_class = np.where(fits, idle_after - share_after, idle_after).astype(np.float64)
    return np.tensordot(target.weight, per_class, axes=1)


@dataclass(frozen=True, slots=True)
class ClusterFrag:
    """The cluster's fragmentation under a target workload, in milli-units of device share."""

    frag_milli: float
    idle_milli: float
    capacity_milli: float

    @property
    def amount_pct(self) -> float:
        """F(M) as a percentage of the cluster's device capacity."""
        return 100.0 * self.frag_milli / self.capacity_milli if self.capacity_milli else 0.0

    @property
    def ratio_pct(self) -> float:
        """F(M) as a percentage of the idle device share."""
        return 100.0 * self.frag_milli / self.idle_milli if self.idle_milli else 0.0


def cluster_frag(
    state: ClusterState, target: TargetWorkload, device_class: str = "gpu"
) -> ClusterFrag:
    """F(M) over all active nodes of ``state`` for devices of ``device_class``."""
    slots = state.device_mask(device_class)
    per_node = expected_frag(
        state.cpu_free, state.dev_free, slots, eligibility(state, target, device_class), target
    )
    active = state.active
    idle = np.where(slots, state.dev_free, 0).sum()
    return ClusterFrag(float(per_node[active].sum()), float(idle), float(slots.sum() * SHARE_UNITS))
