"""node-selector: the node's labels include every ``key: value`` of the task's node selector.

Points: filter. Args: none.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from hetsched.cluster.state import ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import BoolArray, IntArray, Rejection
from hetsched.framework.registry import register

__all__ = ["NodeSelector", "label_mask"]


def label_mask(state: ClusterState, key: str, value: str) -> BoolArray:
    """Nodes labelled ``key=value``; cached per cluster version."""
    return state.memo(
        ("label", key, value),
        lambda: np.fromiter(
            (n.labels.get(key) == value for n in state.nodes), np.bool_, len(state)
        ),
    )


@register("node-selector")
class NodeSelector:
    """Node labels match the task's node selector."""

    name = "node-selector"
    row_local = True

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        pass

    def filter(self, ctx: CycleContext, candidates: BoolArray) -> BoolArray:
        mask = candidates
        for key, value in ctx.request.node_selector.items():
            mask = mask & label_mask(ctx.state, key, value)
        return mask

    def filter_rows(self, ctx: CycleContext, rows: IntArray) -> BoolArray | None:
        if not ctx.request.node_selector:
            return None
        mask = np.ones(len(rows), np.bool_)
        for key, value in ctx.request.node_selector.items():
            mask &= label_mask(ctx.state, key, value)[rows]
        return mask

    def diagnose(self, ctx: CycleContext, candidates: BoolArray) -> list[Rejection]:
        return [
            (f"node label {key}={value} missing", ~label_mask(ctx.state, key, value))
            for key, value in ctx.request.node_selector.items()
        ]
