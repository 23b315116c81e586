"""fit: CPU, memory and devices (class, count, share, selector, alternatives in order).

Points: prefilter, filter. Args: none.

A node fits when its free CPU and memory cover the request and, for every device request,
some alternative finds ``count`` eligible devices with enough free share (whole devices
need all 1000 milli-units free). The prefilter answers UNRESOLVABLE when no node could hold
the task even empty, so such a job is explained, not retried forever. A best-effort job
also counts the nodes' oversubscription slack (the profile's ``overcommit``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from hetsched.cluster.perstate import PerState
from hetsched.cluster.ranked import choice_fits_free
from hetsched.cluster.state import ClusterState, SlotArray
from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import BoolArray, IntArray, Rejection
from hetsched.framework.registry import register
from hetsched.framework.status import Status
from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import DeviceChoice, DeviceRequest, TaskRequest

__all__ = ["Fit", "choice_fits", "fit_mask", "fit_rows", "free_choice_fits", "request_fits"]


def choice_fits(state: ClusterState, choice: DeviceChoice, dev_free: SlotArray) -> BoolArray:
    """Nodes with at least ``choice.count`` eligible devices holding the needed free share.
    On the state's own free shares the answer comes from :func:`free_choice_fits`."""
    if dev_free is state.dev_free:
        return free_choice_fits(state, choice)
    return _choice_fits(state, choice, dev_free, None)


def _choice_fits(
    state: ClusterState, choice: DeviceChoice, dev_free: SlotArray, rows: IntArray | None
) -> BoolArray:
    if dev_free is state.dev_free:
        return choice_fits_free(state, choice, rows)
    eligible = state.device_mask(choice.device_class, choice.selector)
    if rows is not None:
        eligible, dev_free = eligible[rows], dev_free[rows]
    need = SHARE_UNITS if choice.whole else choice.share
    # a uint8 view summed per row: several times faster than count_nonzero(axis=1)
    fitting = (eligible & (dev_free >= need)).view(np.uint8).sum(axis=1, dtype=np.int16)
    return np.asarray(fitting >= choice.count)


@dataclass(slots=True, eq=False)
class _Fits:
    tick: int
    version: int
    mask: BoolArray


#: per cluster state, per device choice: where it fits now (see free_choice_fits)
_FREE_FITS: PerState[dict[DeviceChoice, _Fits]] = PerState()
#: past this fraction of rows changed, a choice's mask is recomputed whole
_REFRESH_WHOLE = 0.1


def free_choice_fits(state: ClusterState, choice: DeviceChoice) -> BoolArray:
    """:func:`choice_fits` on the state's free shares, kept per state and device choice and
    brought up to date on the rows allocated on or released from since (a cluster sees few
    distinct device choices, and each placement changes one or two rows). Read-only."""
    per_state = _FREE_FITS.get(state)
    if per_state is None:
        per_state = {}
        _FREE_FITS.set(state, per_state)
    entry = per_state.get(choice)
    if entry is None or entry.version != state.version or entry.mask.size != len(state):
        entry = per_state[choice] = _Fits(state.tick, state.version, np.zeros(0, np.bool_))
        changed = None
    else:
        changed = state.changed_since(entry.tick)
        if not changed.size:
            return entry.mask
        if changed.size > _REFRESH_WHOLE * len(state):
            changed = None
    if changed is None:
        entry.mask = _choice_fits(state, choice, state.dev_free, None)
    else:
        entry.mask.flags.writeable = True
        entry.mask[changed] = _choice_fits(state, choice, state.dev_free, changed)
    entry.mask.flags.writeable = False
    entry.tick = state.tick
    return entry.mask


def request_fits(state: ClusterState, request: DeviceRequest, dev_free: SlotArray) -> BoolArray:
    """Nodes where some alternative of ``request`` fits."""
    mask = choice_fits(state, request.choices[0], dev_free)
    for choice in request.choices[1:]:
        mask = mask | choice_fits(state, choice, dev_free)
    return mask


def fit_mask(
    state: ClusterState, request: TaskRequest, cpu: IntArray, mem: IntArray, dev: SlotArray
) -> BoolArray:
    """Nodes whose (cpu, mem, dev) capacity holds ``request``: free arrays for now, total
    arrays for "ever". Device requests are checked one by one (see cluster.assign)."""
    mask = (cpu >= request.cpu_milli) & (mem >= request.memory_mib) & state.active
    for device_request in request.devices:
        mask &= request_fits(state, device_request, dev)
    return mask


def fit_rows(
    state: ClusterState, request: TaskRequest, rows: IntArray, best_effort: bool
) -> BoolArray:
    """For each of ``rows``, whether its free capacity holds ``request`` now: the filter's
    verdict row by row (the same comparisons as :func:`fit_mask`, on those rows only)."""
    cpu, mem = state.cpu_free[rows], state.mem_free[rows]
    if best_effort:
        cpu, mem = cpu + state.cpu_slack[rows], mem + state.mem_slack[rows]
    mask = (cpu >= request.cpu_milli) & (mem >= request.memory_mib)
    if not state.all_active():
        mask &= state.active[rows]
    for device_request in request.devices:
        fits = _choice_fits(state, device_request.choices[0], state.dev_free, rows)
        for choice in device_request.choices[1:]:
            fits = fits | _choice_fits(state, choice, state.dev_free, rows)
        mask &= fits
    return mask


def _capacity(state: ClusterState) -> SlotArray:
    return state.memo(
        "slot_capacity",
        lambda: np.asfortranarray(np.where(state.dev_kind >= 0, SHARE_UNITS, 0).astype(np.int32)),
    )


def _holds_class(state: ClusterState, device_class: str) -> BoolArray:
    """Node rows holding a device of ``device_class``, healthy or not (explanations tell
    "no gpu" from "gpu unhealthy" by it)."""

    def compute() -> BoolArray:
        per_kind = np.array(
            [k.device_class == device_class for k in state.kinds] + [False], dtype=np.bool_
        )  # row -1: an absent slot
        held: BoolArray = np.asarray(per_kind[state.dev_kind].any(axis=1), dtype=np.bool_)
        return held

    return state.memo(("holds_class", device_class), compute)


@register("fit")
class Fit:
    """Free CPU, memory and device share cover the request."""

    name = "fit"
    #: a row's verdict depends on the request and that row alone (see Framework)
    row_local = True

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        pass

    def prefilter(self, ctx: CycleContext) -> Status:
        state, request = ctx.state, ctx.request
        # whether some node could hold the request even empty depends on the topology
        # alone (capacity, health, overcommit: all bump ``version``), so it is kept in the
        # state's memo per request: one pass over the nodes per request class, not per job
        known: dict[tuple[TaskRequest, bool], bool] = state.memo("fit_prefilter", dict)
        key = (request, ctx.job.best_effort)
        ever = known.get(key)
        if ever is None:
            ever = known[key] = self._ever_fits(state, request, ctx.job.best_effort)
        if ever:
            return Status.success()
        return Status.unresolvable(
            f"no node of this cluster could hold {request.describe()} even when empty",
            plugin=self.name,
        )

    @staticmethod
    def _ever_fits(state: ClusterState, request: TaskRequest, best_effort: bool) -> bool:
        cpu, mem = state.cpu_cap, state.mem_cap
        if best_effort:
            cpu = (cpu * state.cpu_factor).astype(np.int64)
            mem = (mem * state.mem_factor).astype(np.int64)
        return bool(fit_mask(state, request, cpu, mem, _capacity(state)).any())

    def filter(self, ctx: CycleContext, candidates: BoolArray) -> BoolArray:
        state = ctx.state
        cpu, mem = state.cpu_free, state.mem_free
        if ctx.job.best_effort:
            cpu, mem = cpu + state.cpu_slack, mem + state.mem_slack
        return candidates & fit_mask(state, ctx.request, cpu, mem, state.dev_free)

    def filter_rows(self, ctx: CycleContext, rows: IntArray) -> BoolArray:
        return fit_rows(ctx.state, ctx.request, rows, ctx.job.best_effort)

    def diagnose(self, ctx: CycleContext, candidates: BoolArray) -> list[Rejection]:
        state, request = ctx.state, ctx.request
        out: list[Rejection] = []
        for device_request in request.devices:
            choices = device_request.choices
            present = np.zeros(len(state), np.bool_)
            has_class = np.zeros(len(state), np.bool_)
            matching = np.zeros(len(state), np.bool_)
            for choice in choices:
                present |= _holds_class(state, choice.device_class)
                has_class |= state.device_mask(choice.device_class).any(axis=1)
                matching |= state.device_mask(choice.device_class, choice.selector).any(axis=1)
            named = " or ".join(sorted({c.device_class for c in choices}))
            # a node without the class at all is not broken hardware: two reasons, not one
            out.append((f"no {named}", ~present))
            out.append((f"{named} unhealthy", present & ~has_class))
            selectors = [c.selector for c in choices if c.selector]
            if selectors:
                out.append((f"selector matched no device ({' or '.join(selectors)})", ~matching))
            wanted = " or ".join(c.describe() for c in choices)
            out.append(
                (
                    f"insufficient free {named} (want {wanted})",
                    ~request_fits(state, device_request, state.dev_free),
                ),
            )
        # Device reasons come first: a node with no matching device is best explained by
        # that, whatever its free CPU. Free-share shortfalls are the least specific.
        shortfalls = [r for r in out if r[0].startswith("insufficient free")]
        out = [r for r in out if not r[0].startswith("insufficient free")]
        out += [
            (f"insufficient cpu (want {request.cpu_milli}m)", state.cpu_free < request.cpu_milli),
            (
                f"insufficient memory (want {request.memory_mib}Mi)",
                state.mem_free < request.memory_mib,
            ),
        ]
        return out + shortfalls
