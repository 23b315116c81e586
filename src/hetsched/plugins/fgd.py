"""fgd: Fragmentation Gradient Descent (Weng et al., USENIX ATC '23).

Points: score, device choice (``choose_devices``). Args: ``target`` (the target workload:
task classes with ``cpu_milli``, ``count``, ``share``, ``selector`` and ``weight``; at least
one), ``device_class`` (the devices whose fragmentation is measured, default ``gpu``),
``score`` (``truncated``: the reference's integer ``trunc(100 * sigmoid(-delta / 1000))``,
whose ties the framework's tie-break settles; ``smooth``: the same without truncation).

A node's score falls with delta, the growth of its expected fragmentation under the target
workload (see :mod:`hetsched.cluster.frag`) if the task were placed there. A shared task
(one device, share below 1000) is tried on every eligible device with room and keeps the
best; that device is also the one it takes. Whole-device tasks take the lowest free
eligible devices, as the default device choice does.

Caching: delta depends only on the node's own state, so it is kept per (task shape, node)
and recomputed only for nodes whose free CPU or device share changed since the last call
(found by comparing snapshots, so any allocate or release, by anyone, is noticed). Nodes in
identical states are computed once.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from hetsched.cluster.frag import TargetClass, TargetWorkload, eligibility, expected_frag
from hetsched.cluster.placement import DeviceShare
from hetsched.cluster.state import ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.framework.registry import register
from hetsched.model.device import SHARE_UNITS
from hetsched.plugins._resources import DeviceAsk, device_ask

__all__ = [
    "FGD",
    "FGDArgs",
    "NodeSnapshot",
    "TargetClassArgs",
    "distinct_states",
    "fgd_scores",
    "gradients",
]

#: below this many nodes to recompute, deduplicating identical states costs more than it saves
_DEDUPE_FROM = 24


class TargetClassArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    cpu_milli: int = Field(ge=0)
    count: int = Field(default=0, ge=0)
    share: int = Field(default=0, ge=0, le=SHARE_UNITS)
    selector: str | None = None
    weight: float = Field(default=1.0, gt=0)


class FGDArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    target: list[TargetClassArgs] = Field(min_length=1)
    device_class: str = "gpu"
    score: Literal["truncated", "smooth"] = "truncated"

    def workload(self) -> TargetWorkload:
        return TargetWorkload.of(
            TargetClass(c.cpu_milli, c.count, c.share, c.selector, c.weight) for c in self.target
        )


def fgd_scores(delta: FloatArray, truncated: bool) -> FloatArray:
    """100 * sigmoid(-delta / 1000), truncated to an integer as the reference does."""
    score = 100.0 / (1.0 + np.exp(np.clip(delta, -50_000.0, 50_000.0) / 1000.0))
    return np.asarray(np.floor(score) if truncated else score, np.float64)


class _Columns:
    """Delta and chosen slot per (task shape, node), with validity; rows are task shapes."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.index: dict[tuple[int, DeviceAsk], int] = {}
        self.delta = np.zeros((4, nodes), np.float64)
        self.slot = np.full((4, nodes), -1, np.int64)
        self.ok = np.zeros((4, nodes), np.bool_)

    def column(self, key: tuple[int, DeviceAsk]) -> int:
        col = self.index.get(key)
        if col is None:
            col = self.index[key] = len(self.index)
            if col == len(self.ok):  # grow by doubling
                self.delta = np.concatenate([self.delta, np.zeros_like(self.delta)])
                self.slot = np.concatenate([self.slot, np.full_like(self.slot, -1)])
                self.ok = np.concatenate([self.ok, np.zeros_like(self.ok)])
        return col


@register("fgd", args=FGDArgs)
class FGD:
    """Least growth of expected fragmentation under the target workload."""

    name = "fgd"

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        assert isinstance(args, FGDArgs)
        self._target = args.workload()
        self._class = args.device_class
        self._truncated = args.score == "truncated"
        self._snapshot = NodeSnapshot()
        self._cols = _Columns(0)

    # -- cache upkeep --------------------------------------------------------------------

    def _sync(self, state: ClusterState) -> None:
        """Invalidate the nodes whose free CPU or device share changed since the last call."""
        changed = self._snapshot.changes(state)
        if changed is None:
            self._cols = _Columns(len(state))
        elif changed.size:
            self._cols.ok[:, changed] = False

    def _lookup(self, ctx: CycleContext, rows: IntArray) -> tuple[int, DeviceAsk]:
        """The column of this task's shape, with every row of ``rows`` computed."""
        state = ctx.state
        self._sync(state)
        ask = device_ask(ctx.request, self._class)
        col = self._cols.column((ctx.request.cpu_milli, ask))
        need = rows[~self._cols.ok[col, rows]]
        if need.size:
            self._compute(state, ctx.request.cpu_milli, ask, col, need)
        return col, ask

    # -- the gradient --------------------------------------------------------------------

    def _compute(
        self, state: ClusterState, cpu: int, ask: DeviceAsk, col: int, rows: IntArray
    ) -> None:
        unique, inverse = rows, None
        if rows.size >= _DEDUPE_FROM:
            unique, inverse = distinct_states(state, rows)
        deltas = gradients(state, self._target, self._class, cpu, ask, unique)
        count, share, selector = ask
        chosen = np.full(unique.size, -1, np.int64)
        if count == 1 and share < SHARE_UNITS:
            room = state.device_mask(self._class, selector)[unique] & (
                state.dev_free[unique] >= share
            )
            score = np.where(room, fgd_scores(deltas, self._truncated), -np.inf)
            chosen = np.argmax(score, axis=1)  # ties: the lowest slot, as the reference
            delta = np.take_along_axis(deltas, chosen[:, None], axis=1)[:, 0]
        else:
            delta = deltas[:, 0]
        if inverse is not None:
            delta, chosen = delta[inverse], chosen[inverse]
        self._cols.delta[col, rows] = delta
        self._cols.slot[col, rows] = chosen
        self._cols.ok[col, rows] = True

    # -- extension points ----------------------------------------------------------------

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        col, _ = self._lookup(ctx, rows)
        return fgd_scores(self._cols.delta[col, rows], self._truncated)

    def choose_devices(self, ctx: CycleContext, row: int) -> tuple[DeviceShare, ...] | None:
        """The device a shared task's best delta came from; None (the default) otherwise."""
        col, (count, share, _) = self._lookup(ctx, np.array([row], np.int64))
        slot = int(self._cols.slot[col, row])
        if count != 1 or share >= SHARE_UNITS or slot < 0 or len(ctx.request.devices) != 1:
            return None
        return (DeviceShare(ctx.state.device_id(row, slot), share),)

    def delta(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        """The fragmentation gradient of ``rows`` for ``ctx.request``, in milli-units."""
        col, _ = self._lookup(ctx, rows)
        return np.array(self._cols.delta[col, rows], np.float64)


class NodeSnapshot:
    """Which nodes' free CPU or device share changed since the last look.

    Found by comparing with a copy, so any allocate or release, by anyone, is noticed.
    """

    def __init__(self) -> None:
        self._state: ClusterState | None = None
        self._version = -1
        self._cpu: IntArray = np.zeros(0, np.int64)
        #: same dtype and layout as the state's own slot matrix
        self._dev: npt.NDArray[np.integer[Any]] = np.zeros((0, 0), np.int64)

    def changes(self, state: ClusterState) -> IntArray | None:
        """The rows that changed since the last call; None if everything is to be redone
        (another state, or its topology or health changed)."""
        if (
            state is not self._state
            or state.version != self._version
            or self._dev.shape != state.dev_free.shape
        ):
            self._state = state
            self._version = state.version
            self._cpu = state.cpu_free.copy()
            self._dev = state.dev_free.copy()
            return None
        changed = (state.cpu_free != self._cpu) | (state.dev_free != self._dev).any(axis=1)
        rows = np.flatnonzero(changed)
        if rows.size:
            self._cpu[rows] = state.cpu_free[rows]
            self._dev[rows] = state.dev_free[rows]
        return rows


def gradients(
    state: ClusterState,
    target: TargetWorkload,
    device_class: str,
    cpu: int,
    ask: DeviceAsk,
    rows: IntArray,
) -> FloatArray:
    """The fragmentation gradient of placing a task on each of ``rows``, in milli-units.

    Shape (rows, slots) for a shared task (one device, share below 1000): column s is the
    gradient if slot s takes the share (meaningless where s has no room); shape (rows, 1)
    otherwise (whole devices: the lowest free eligible ones; no devices: CPU only).
    """
    slots = state.device_mask(device_class)[rows]
    elig = eligibility(state, target, device_class)[:, rows]
    cpu_now = state.cpu_free[rows]
    free = state.dev_free[rows]
    base = expected_frag(cpu_now, free, slots, elig, target)
    count, share, selector = ask
    if count == 0:
        after = expected_frag(cpu_now - cpu, free, slots, elig, target)
        return np.asarray((after - base)[:, None], np.float64)
    if count == 1 and share < SHARE_UNITS:
        # every slot as the one that takes the share: a (node, slot) grid of what-ifs
        width = free.shape[1]
        what_if = free[:, None, :] - share * np.eye(width, dtype=np.int64)[None]
        after = expected_frag(
            np.broadcast_to((cpu_now - cpu)[:, None], (rows.size, width)),
            what_if,
            slots[:, None, :],
            elig[:, :, None, :],
            target,
        )
        return np.asarray(after - base[:, None], np.float64)
    whole = state.device_mask(device_class, selector)[rows] & (free >= SHARE_UNITS)
    take = whole & (np.cumsum(whole, axis=1) <= count)
    after = expected_frag(
        cpu_now - cpu, np.where(take, free - SHARE_UNITS, free), slots, elig, target
    )
    return np.asarray((after - base)[:, None], np.float64)


def distinct_states(state: ClusterState, rows: IntArray) -> tuple[IntArray, IntArray]:
    """One representative row per distinct (free cpu, free shares, device kinds) state, and
    for each row of ``rows`` the index of its representative."""
    kinds = np.where(state.dev_healthy[rows], state.dev_kind[rows], -1)
    keys = np.column_stack([state.cpu_free[rows], state.dev_free[rows], kinds])
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    return rows[first], np.asarray(inverse).reshape(-1)
