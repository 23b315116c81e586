"""taints: a node's NoSchedule and NoExecute taints must all be tolerated by the task.

Points: filter. Args: none. PreferNoSchedule taints do not filter.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from hetsched.cluster.state import ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import BoolArray, IntArray, Rejection
from hetsched.framework.registry import register
from hetsched.model.device import Node, TaintEffect
from hetsched.model.job import Toleration

__all__ = ["Taints", "tolerated", "untolerated_mask"]


def tolerated(node: Node, tolerations: tuple[Toleration, ...]) -> bool:
    return all(
        taint.effect is TaintEffect.PREFER_NO_SCHEDULE
        or any(t.tolerates(taint.key, taint.value, taint.effect) for t in tolerations)
        for taint in node.taints
    )


def untolerated_mask(state: ClusterState, tolerations: tuple[Toleration, ...]) -> BoolArray:
    """Nodes with a hard taint that ``tolerations`` do not cover; cached per cluster version."""

    def compute() -> BoolArray:
        mask = np.zeros(len(state), np.bool_)
        for row, node in enumerate(state.nodes):
            if node.taints and not tolerated(node, tolerations):
                mask[row] = True
        return mask

    return state.memo(("taints", tolerations), compute)


def _any_untolerated(state: ClusterState, tolerations: tuple[Toleration, ...]) -> bool:
    """Whether some node has a hard taint that ``tolerations`` do not cover (most clusters:
    no taints at all); cached per cluster version."""
    known: dict[tuple[Toleration, ...], bool] = state.memo("taints.any", dict)
    found = known.get(tolerations)
    if found is None:
        found = known[tolerations] = bool(untolerated_mask(state, tolerations).any())
    return found


@register("taints")
class Taints:
    """The task tolerates every hard taint of the node."""

    name = "taints"
    row_local = True

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        pass

    def filter(self, ctx: CycleContext, candidates: BoolArray) -> BoolArray:
        if not _any_untolerated(ctx.state, ctx.request.tolerations):
            return candidates
        return candidates & ~untolerated_mask(ctx.state, ctx.request.tolerations)

    def filter_rows(self, ctx: CycleContext, rows: IntArray) -> BoolArray | None:
        state, tolerations = ctx.state, ctx.request.tolerations
        if not _any_untolerated(state, tolerations):
            return None
        return ~untolerated_mask(state, tolerations)[rows]

    def diagnose(self, ctx: CycleContext, candidates: BoolArray) -> list[Rejection]:
        return [("untolerated taint", untolerated_mask(ctx.state, ctx.request.tolerations))]
