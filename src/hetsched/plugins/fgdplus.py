"""fgdplus: FGD's fragmentation gradient, plus CPU balance and the eventual waste of GPU gaps.

Points: score, device choice (``choose_devices``). Args: FGD's (``target``, ``device_class``,
``score``) and:

- ``cpu_weight`` (default 4): weight of the CPU-balance term;
- ``cpu_per_gpu`` (milli-CPU per whole device; default: the target workload's, over its
  device-using classes): the CPU that each unit of idle device share is assumed to need;
- ``gap_weight`` (default 2): weight of the gap-value term;
- ``gap_patience`` (0 to 1, default 0.7): how long a gap waits for a task that fits it
  (below).

The node's delta, in milli-units of device share (lower is better), for a task placed on
node n (a shared task: on device slot s of n) is

    delta = fgd + gap_weight * (V(g_s - d) - V(g_s)) + cpu_weight * (S(n') - S(n))

- ``fgd``: FGD's gradient, the growth of expected fragmentation under the target workload
  (:mod:`hetsched.plugins.fgd`);
- ``V(g)``: the *eventual* waste of a device with g milli-units free, if tasks of the
  target workload keep arriving: a task that fits takes its share and the rest waits on;
  one that does not fit leaves the gap to wait again (with probability ``gap_patience``)
  or ends it as waste. FGD sees one step ahead (is the next task stranded?); V sees the
  whole future of the gap: two 470 shares leave 60 that nothing in the default trace uses,
  a 470 and a 320 leave 210 that only rare small tasks fill. V is computed once per device
  kind, from the classes whose selector admits it;
- ``S(n) = max(0, idle_n - cpu_n / cpu_per_gpu)``: idle device share of n that its free
  CPU could not serve if the tasks that fill it need the workload's CPU per device. FGD
  counts a node's idle share as fragment only once its CPU is below a task's request;
  S sees CPU-hungry tasks draining a node's CPU long before that, and keeps them on nodes
  rich in CPU per device.

The three terms pack devices where CPU is plentiful. Where it is not, they hurt: when the
target workload asks for as much CPU per device as the cluster has or more (its tasks,
those without devices too, would run out of CPU before they run out of devices), CPU is
the resource that binds, and keeping CPU beside idle devices only spreads the CPU-only
tasks that must take it anyway. Then (``when_cpu_binds: fgd``, the default) the score is
FGD's alone; ``keep`` keeps the terms whatever binds. The comparison is the target's
milli-CPU per milli-unit of device share (every class, with and without devices) against
the cluster's (every node's CPU over its devices of ``device_class``): a fact of the
workload and the cluster, not a tuned constant.

The score is FGD's: ``trunc(100 * sigmoid(-delta / 1000))`` (``score: smooth`` without the
truncation). A shared task takes the device whose delta scores best (lowest slot on ties).

The weights were tuned on four openb traces with seeds outside the evaluation set and
validated on the others; see docs/fragmentation.md.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from hetsched.cluster.frag import (
    TargetWorkload,
    eligibility,
    expected_frag,
    expected_frag_after_share,
)
from hetsched.cluster.placement import DeviceShare
from hetsched.cluster.state import ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.framework.registry import register
from hetsched.model.device import SHARE_UNITS
from hetsched.plugins._resources import DeviceAsk, device_ask
from hetsched.plugins.fgd import (
    FGDArgs,
    NodeSnapshot,
    distinct_states,
    fgd_scores,
    gradients,
)

__all__ = ["Best", "FGDPlus", "FGDPlusArgs", "gap_values", "stranded"]

#: below this many nodes to recompute, deduplicating identical states costs more than it saves
_DEDUPE_FROM = 24


class FGDPlusArgs(FGDArgs):
    cpu_weight: float = Field(default=8.0, ge=0)
    cpu_per_gpu: float | None = Field(default=None, gt=0)
    gap_weight: float = Field(default=2.0, ge=0)
    gap_patience: float = Field(default=0.7, ge=0, lt=1)
    reserve_weight: float = Field(default=10.0, ge=0)
    #: where the target's CPU per device is at least the cluster's: FGD's score alone
    #: (``fgd``) or the three terms anyway (``keep``)
    when_cpu_binds: Literal["fgd", "keep"] = "fgd"


def gap_values(target: TargetWorkload, eligible: np.ndarray, patience: float) -> FloatArray:
    """V(g) for g = 0..1000 milli-units free on one device, for the classes ``eligible``.

    A class asking for whole devices fills a free device (1000). With f(g) the popularity of
    the eligible device classes that fit g (normalised over the eligible device classes)
    and m(g) = 1 - f(g):

        V(g) = (sum over fitting classes of p * V(g - d) + m(g) * (1 - patience) * g)
               / (1 - m(g) * patience)

    V(0) = 0; with no eligible device class every gap is waste, V(g) = g.
    """
    uses = eligible & (target.count > 0)
    values = np.arange(SHARE_UNITS + 1, dtype=np.float64)
    if not uses.any():
        return values
    weight = target.weight[uses] / target.weight[uses].sum()
    size = np.where(target.count[uses] == 1, target.share[uses], SHARE_UNITS)
    for gap in range(1, SHARE_UNITS + 1):
        fits = size <= gap
        miss = 1.0 - float(weight[fits].sum())
        filled = float(weight[fits] @ values[gap - size[fits]])
        values[gap] = (filled + miss * (1.0 - patience) * gap) / (1.0 - miss * patience)
    return values


def kind_pressure(state: ClusterState, target: TargetWorkload, device_class: str) -> FloatArray:
    """Per device kind (and a last 0 for absent slots), how much of it the target's
    selective classes need: the largest demand/capacity ratio, capped at 1, over the sets
    of kinds that some class is limited to (a class that may use every kind counts for
    none). Demand is the target's device share scaled to the cluster's capacity."""
    slots = state.device_mask(device_class)
    kinds = state.dev_kind
    capacity = np.bincount(kinds[slots], minlength=len(state.kinds)).astype(np.float64)
    present = frozenset(np.flatnonzero(capacity).tolist())
    pressure = np.zeros(len(state.kinds) + 1, np.float64)
    demand = target.weight * target.count * target.share
    if not present or demand.sum() <= 0:
        return pressure
    demand = demand * capacity.sum() / demand.sum()
    elig = eligibility(state, target, device_class)
    limited: dict[frozenset[int], float] = {}
    for m in np.flatnonzero(demand > 0):
        allowed = frozenset(np.unique(kinds[elig[m] & slots]).tolist())
        if allowed and allowed != present:
            limited[allowed] = limited.get(allowed, 0.0) + float(demand[m])
    for group in limited:
        need = sum(d for other, d in limited.items() if other <= group)
        ratio = min(need / float(capacity[list(group)].sum()), 1.0)
        for kind in group:
            pressure[kind] = max(pressure[kind], ratio)
    return pressure


def stranded(idle: FloatArray, cpu: FloatArray, cpu_per_milli: float) -> FloatArray:
    """Idle device share (milli) that ``cpu`` free milli-CPU could not serve."""
    return np.asarray(np.maximum(idle - cpu / cpu_per_milli, 0.0), np.float64)


def _gradients(
    state: ClusterState,
    target: TargetWorkload,
    device_class: str,
    cpu: int,
    ask: DeviceAsk,
    rows: IntArray,
) -> FloatArray:
    """FGD's :func:`~hetsched.plugins.fgd.gradients`, the same numbers; a shared task's
    per-slot what-ifs come from :func:`expected_frag_after_share` (one slot's change to
    the per-class sums) instead of re-measuring every what-if state."""
    count, share, _ = ask
    if count != 1 or share >= SHARE_UNITS:
        return gradients(state, target, device_class, cpu, ask, rows)
    slots = state.device_mask(device_class)[rows]
    elig = eligibility(state, target, device_class)[:, rows]
    cpu_now = state.cpu_free[rows]
    free = state.dev_free[rows]
    base = expected_frag(cpu_now, free, slots, elig, target)
    after = expected_frag_after_share(cpu_now - cpu, free, slots, elig, target, share)
    return np.asarray(after - base[:, None], np.float64)


class _Cache:
    """FGD's gradients per (task shape, node, slot), with validity per (shape, node)."""

    def __init__(self, nodes: int, width: int) -> None:
        self.index: dict[tuple[int, DeviceAsk], int] = {}
        self.delta = np.zeros((4, nodes, max(width, 1)), np.float64)
        self.ok = np.zeros((4, nodes), np.bool_)

    def column(self, key: tuple[int, DeviceAsk]) -> int:
        col = self.index.get(key)
        if col is None:
            col = self.index[key] = len(self.index)
            if col == len(self.ok):  # grow by doubling
                self.delta = np.concatenate([self.delta, np.zeros_like(self.delta)])
                self.ok = np.concatenate([self.ok, np.zeros_like(self.ok)])
        return col


@register("fgdplus", args=FGDPlusArgs)
class FGDPlus:
    """FGD plus CPU balance and the eventual waste of device gaps (see docs/fragmentation.md)."""

    name = "fgdplus"

    def __init__(self, args: BaseModel | None = None, handle: Any = None) -> None:
        assert isinstance(args, FGDPlusArgs)
        self._args = args
        self._class = args.device_class
        self._truncated = args.score == "truncated"
        self._snapshot = NodeSnapshot()
        self._cache = _Cache(0, 0)
        self._idle: IntArray = np.zeros(0, np.int64)
        self.set_target(args.workload())

    def set_target(self, target: TargetWorkload) -> None:
        """Score against ``target`` from now on (drivers that learn the workload call this)."""
        self._target = target
        uses = target.count > 0
        cpu_per_milli = 0.0
        if uses.any():
            gpu = float((target.weight * target.count * target.share)[uses].sum())
            cpu_per_milli = float((target.weight * target.cpu)[uses].sum()) / gpu
        if self._args.cpu_per_gpu is not None:
            cpu_per_milli = self._args.cpu_per_gpu / SHARE_UNITS
        self._cpu_per_milli = cpu_per_milli
        asked = float((target.weight * target.count * target.share).sum())
        cpu = float((target.weight * target.cpu).sum())
        #: milli-CPU the whole target workload asks per milli-unit of device share
        self._cpu_demand = cpu / asked if asked > 0 else float("inf")
        #: whether CPU binds on the cluster last synced (see the module docstring)
        self.cpu_binds = False
        self._values: FloatArray = np.zeros((1, SHARE_UNITS + 1))
        self._values_key: tuple[int, int, int] | None = None
        self._pressure: FloatArray = np.zeros(1)
        self._pressure_key: tuple[int, int, int] | None = None
        self._floors: dict[str | None, float] = {}
        self._snapshot = NodeSnapshot()

    # -- the terms -----------------------------------------------------------------------

    def _sync(self, state: ClusterState) -> None:
        """Invalidate what changed since the last call: gradients and idle share per node."""
        changed = self._snapshot.changes(state)
        if changed is None:
            self._cache = _Cache(len(state), state.width)
            self._idle = np.where(state.device_mask(self._class), state.dev_free, 0).sum(axis=1)
            self._check_binding(state)
        elif changed.size:
            self._cache.ok[:, changed] = False
            mask = state.device_mask(self._class)[changed]
            self._idle[changed] = np.where(mask, state.dev_free[changed], 0).sum(axis=1)

    def _check_binding(self, state: ClusterState) -> None:
        """Whether CPU binds: the target's CPU per device at or above the cluster's."""
        devices = int(state.device_mask(self._class)[state.active].sum()) * SHARE_UNITS
        supply = float(state.cpu_cap[state.active].sum()) / devices if devices else 0.0
        binds = self._cpu_demand >= supply
        self.cpu_binds = binds and self._args.when_cpu_binds == "fgd"

    def _fgd(self, state: ClusterState, cpu: int, ask: DeviceAsk, rows: IntArray) -> np.ndarray:
        """FGD's gradient for ``rows``: (rows, slots) for a shared task, (rows, 1) else."""
        count, share, _ = ask
        cache = self._cache
        col = cache.column((cpu, ask))
        need = rows[~cache.ok[col, rows]]
        if need.size:
            unique, inverse = need, None
            if need.size >= _DEDUPE_FROM:
                unique, inverse = distinct_states(state, need)
            fresh = _gradients(state, self._target, self._class, cpu, ask, unique)
            cache.delta[col, need, : fresh.shape[1]] = fresh if inverse is None else fresh[inverse]
            cache.ok[col, need] = True
        width = cache.delta.shape[2] if count == 1 and share < SHARE_UNITS else 1
        return cache.delta[col, rows, :width]

    def _gap_delta(self, state: ClusterState, share: int, rows: IntArray) -> FloatArray:
        """V(g - d) - V(g) per (row, slot); slots without room give nonsense (masked later)."""
        flat = self._value_table(state).ravel()
        # row kind, column gap of the (kinds + 1) x 1001 table, flattened; kind -1 (absent
        # slots) wraps to the last row, which is zeros
        at = state.dev_kind[rows].astype(np.int64) % (len(state.kinds) + 1) * (SHARE_UNITS + 1)
        at += state.dev_free[rows]
        after = at - np.minimum(state.dev_free[rows], share)
        return np.asarray(flat.take(after) - flat.take(at), np.float64)

    def _value_table(self, state: ClusterState) -> FloatArray:
        """V per device kind (rows; the last row, for absent slots, is zeros), per gap."""
        key = (id(state), state.version, len(state.kinds))
        if self._values_key != key:
            elig = eligibility(state, self._target, self._class)
            table = np.zeros((len(state.kinds) + 1, SHARE_UNITS + 1), np.float64)
            for kind in range(len(state.kinds)):
                where = np.argwhere(state.dev_kind == kind)
                if where.size:
                    row, slot = where[0]
                    table[kind] = gap_values(
                        self._target, elig[:, row, slot], self._args.gap_patience
                    )
            self._values = table
            self._values_key = key
        return self._values

    def _reserve_delta(self, state: ClusterState, ask: DeviceAsk, rows: IntArray) -> FloatArray:
        """Share taken times the pressure on its kind above the least the task could face;
        (rows, slots) for a shared task, (rows, 1) else."""
        count, share, selector = ask
        if count == 0:
            return np.zeros((rows.size, 1), np.float64)
        key = (id(state), state.version, len(state.kinds))
        if self._pressure_key != key:
            self._pressure = kind_pressure(state, self._target, self._class)
            self._pressure_key = key
            self._floors = {}
        if not self._pressure.any():
            return np.zeros((rows.size, 1), np.float64)
        allowed = state.device_mask(self._class, selector)
        floor = self._floors.get(selector)
        if floor is None:
            kinds = state.dev_kind[allowed]
            floor = self._floors[selector] = float(self._pressure[kinds].min()) if kinds.size else 0
        here = self._pressure[state.dev_kind[rows]] - floor
        if count == 1 and share < SHARE_UNITS:
            return np.asarray(share * here, np.float64)
        mask = allowed[rows]
        mean = (here * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1)
        return np.asarray((count * share * mean)[:, None], np.float64)

    def _cpu_delta(self, ctx: CycleContext, rows: IntArray, ask: DeviceAsk) -> FloatArray:
        """S(n') - S(n) per row (call after :meth:`_sync`)."""
        idle = self._idle[rows].astype(np.float64)
        cpu = ctx.state.cpu_free[rows].astype(np.float64)
        count, share, _ = ask
        before = stranded(idle, cpu, self._cpu_per_milli)
        after = stranded(idle - count * share, cpu - ctx.request.cpu_milli, self._cpu_per_milli)
        return after - before

    def _extra(self, ctx: CycleContext, rows: IntArray, ask: DeviceAsk, shared: bool) -> Any:
        """The three terms' part of the delta (0 where CPU binds: FGD's score alone)."""
        args, state = self._args, ctx.state
        extra: Any = 0.0
        if self.cpu_binds:
            return extra
        if args.cpu_weight and self._cpu_per_milli > 0:
            extra = extra + args.cpu_weight * self._cpu_delta(ctx, rows, ask)[:, None]
        if args.reserve_weight:
            extra = extra + args.reserve_weight * self._reserve_delta(state, ask, rows)
        if shared and args.gap_weight:
            extra = extra + args.gap_weight * self._gap_delta(state, ask[1], rows)
        return extra

    # -- extension points ----------------------------------------------------------------

    def _scores(self, ctx: CycleContext, rows: IntArray) -> tuple[FloatArray, IntArray]:
        """Per row, its score and the slot a shared task would take (-1 otherwise)."""
        state = ctx.state
        self._sync(state)
        ask = device_ask(ctx.request, self._class)
        count, share, selector = ask
        delta = self._fgd(state, ctx.request.cpu_milli, ask, rows)
        shared = count == 1 and share < SHARE_UNITS
        extra = self._extra(ctx, rows, ask, shared)
        score = fgd_scores(delta + extra, self._truncated)
        if not shared:
            return score[:, 0], np.full(rows.size, -1, np.int64)
        room = state.device_mask(self._class, selector)[rows] & (state.dev_free[rows] >= share)
        score = np.where(room, score, -np.inf)
        slot = np.argmax(score, axis=1)  # ties: the lowest slot
        return np.take_along_axis(score, slot[:, None], axis=1)[:, 0], slot

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        return self._scores(ctx, rows)[0]

    def choose_devices(self, ctx: CycleContext, row: int) -> tuple[DeviceShare, ...] | None:
        """The device a shared task's best delta came from; None (the default) otherwise."""
        count, share, _ = device_ask(ctx.request, self._class)
        if count != 1 or share >= SHARE_UNITS or len(ctx.request.devices) != 1:
            return None
        score, slot = self._scores(ctx, np.array([row], np.int64))
        if slot[0] < 0 or not np.isfinite(score[0]):
            return None
        return (DeviceShare(ctx.state.device_id(row, int(slot[0])), share),)


@register("best", args=FGDPlusArgs)
class Best(FGDPlus):
    """The best placement score measured on openb: ``fgdplus`` under another name."""

    name = "best"
