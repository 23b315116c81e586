"""Device fit by rank: per node, the free shares of its healthy devices in descending order.

A node holds ``count`` eligible devices with at least ``need`` free exactly when the
``count``-th largest free share among its eligible devices is at least ``need``. On a node
whose every healthy device a (class, selector) admits (the usual case: a node's devices are
alike) that is the ``count``-th largest healthy free share, one column of
:func:`ranked_free`, so a device choice's verdict for many nodes is two gathers and a
comparison instead of a pass over every slot of those nodes. Nodes where the (class,
selector) admits only some healthy devices are counted slot by slot.

The ranks are kept per cluster state and brought up to date on the rows allocated on or
released from since they were last read (``ClusterState.changed_since``); a topology or
health change (``version``) ranks every node again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsched.cluster.perstate import PerState
from hetsched.cluster.state import BoolArray, ClusterState, IntArray, SlotArray
from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import DeviceChoice

__all__ = ["choice_fits_free", "ranked_free"]

#: the rank of an absent or unhealthy slot (below any share a request can need: a choice
#: needs at least 1)
_ABSENT = 0
#: past this many changes, ranks are refreshed by numpy, not row by row
_BY_ROW = 4


@dataclass(slots=True, eq=False)
class _Ranks:
    tick: int
    version: int
    ranked: SlotArray
    #: rows with an unhealthy device (the others rank their free shares as they are)
    sick: frozenset[int]
    #: (class, selector) -> :func:`_cover`, for this version
    covers: dict[tuple[str, str | None], tuple[BoolArray, IntArray]]


_RANKS: PerState[_Ranks] = PerState()


def _forked(original: ClusterState, fork: ClusterState) -> None:
    """A fork starts from a copy of the original's ranks: its ``changed_since`` answers for
    any tick up to the fork, from the row ticks it copied."""
    kept = _RANKS.get(original)
    if kept is not None and kept.version == original.version:
        ranked = kept.ranked.copy(order="F")
        _RANKS.set(fork, _Ranks(kept.tick, kept.version, ranked, kept.sick, dict(kept.covers)))


ClusterState.on_fork(_forked)


def _rank(state: ClusterState, rows: IntArray | slice) -> SlotArray:
    usable = np.where(state.dev_healthy[rows], state.dev_free[rows], _ABSENT)
    return np.sort(usable, axis=1)[:, ::-1]


def ranked_free(state: ClusterState) -> SlotArray:
    """``[node, k]``: the (k+1)-th largest free share among the node's healthy devices, 0
    past its healthy devices; column-major, so a column is contiguous. A read-only view."""
    view = _kept(state).ranked.view()
    view.flags.writeable = False
    return view


def _kept(state: ClusterState) -> _Ranks:
    kept = _RANKS.get(state)
    if kept is None or kept.version != state.version or kept.ranked.shape != state.dev_free.shape:
        ranked = np.asfortranarray(_rank(state, slice(None)), np.int32)
        sick = np.flatnonzero(((state.dev_kind >= 0) & ~state.dev_healthy).any(axis=1))
        kept = _Ranks(state.tick, state.version, ranked, frozenset(sick.tolist()), {})
        _RANKS.set(state, kept)
    elif kept.tick != state.tick:
        rows = state.recent_changes(kept.tick, _BY_ROW)
        if rows is None:
            changed = state.changed_since(kept.tick)
            kept.ranked[changed] = _rank(state, changed)
        else:
            for row in set(rows):
                _rerank(state, kept, row)
        kept.tick = state.tick
    return kept


def _rerank(state: ClusterState, kept: _Ranks, row: int) -> None:
    """One row ranked again on plain lists (a handful of slots: numpy calls cost more)."""
    shares: list[int] = state.dev_free[row].tolist()
    if row in kept.sick:
        healthy = state.dev_healthy[row].tolist()
        shares = [free if ok else _ABSENT for free, ok in zip(shares, healthy, strict=True)]
    shares.sort(reverse=True)
    kept.ranked[row] = shares


def _cover(
    state: ClusterState, device_class: str, selector: str | None
) -> tuple[BoolArray, IntArray]:
    """Nodes whose every healthy device the (class, selector) admits (and at least one),
    and the nodes where it admits some healthy devices but not all."""
    eligible = state.device_mask(device_class, selector).sum(axis=1)
    healthy = (state.dev_healthy & state.active[:, None]).sum(axis=1)
    full = (eligible > 0) & (eligible == healthy)
    full.flags.writeable = False
    return full, ((eligible > 0) & (eligible < healthy)).nonzero()[0]


def _count_slots(state: ClusterState, choice: DeviceChoice, rows: IntArray, need: int) -> BoolArray:
    """The verdict slot by slot, for nodes of mixed devices."""
    eligible = state.device_mask(choice.device_class, choice.selector)[rows]
    fitting = (eligible & (state.dev_free[rows] >= need)).sum(axis=1)
    return np.asarray(fitting >= choice.count)


def choice_fits_free(
    state: ClusterState, choice: DeviceChoice, rows: IntArray | None = None
) -> BoolArray:
    """Whether each node (each of ``rows``) has ``choice.count`` eligible devices with the
    free share the choice needs, now."""
    need = SHARE_UNITS if choice.whole else choice.share
    kept = _kept(state)
    ranked = kept.ranked
    if choice.count > ranked.shape[1]:
        return np.zeros(len(state) if rows is None else rows.size, np.bool_)
    cover = kept.covers.get((choice.device_class, choice.selector))
    if cover is None:
        cover = _cover(state, choice.device_class, choice.selector)
        kept.covers[(choice.device_class, choice.selector)] = cover
    full, mixed = cover
    column = ranked[:, choice.count - 1]
    if rows is None:
        fits = full & (column >= need)
        if mixed.size:
            fits[mixed] = _count_slots(state, choice, mixed, need)
        return fits
    fits = full[rows] & (column[rows] >= need)
    if mixed.size:
        some = np.isin(rows, mixed)
        if some.any():
            fits[some] = _count_slots(state, choice, rows[some], need)
    return fits
