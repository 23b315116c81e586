"""Why a job waits, member by member.

The core counts rejected nodes per reason (``insufficient free gpu: 2 nodes``); in a
federation each node is a member, so the explanation names them: for each member, the first
filter of the profile that passes it over, and its reason (``member b: unreachable``,
``member c: insufficient free gpu (want 4x gpu)``). A member every filter accepts is one the
job fits now (it waits for something else: its quota, a gang hold, its place in line).
"""

from __future__ import annotations

import numpy as np

from hetsched.cluster.state import ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.runtime import Framework, NodeRejections
from hetsched.model.job import Job

__all__ = ["by_member"]


def by_member(
    framework: Framework, state: ClusterState, job: Job, now: float
) -> list[NodeRejections]:
    """One line per active member (a what-if: nothing changes)."""
    ctx = CycleContext(state, job, job.resources, now, what_if=True)
    out: list[NodeRejections] = []
    for row in np.flatnonzero(state.active):
        name = state.nodes[row].name
        mask = np.zeros(len(state), np.bool_)
        mask[row] = True
        out.append(_one(framework, ctx, mask, int(row), name))
    return out


def _one(
    framework: Framework, ctx: CycleContext, mask: np.ndarray, row: int, name: str
) -> NodeRejections:
    for plugin in framework.filters:
        try:
            if plugin.filter(ctx, mask)[row]:
                continue
            reasons = plugin.diagnose(ctx, mask)
        except Exception as exc:
            return NodeRejections(plugin.name, f"member {name}: {plugin.name} failed: {exc}", 1)
        text = next((reason for reason, rows in reasons if rows[row]), "rejected")
        if not text.startswith("member "):
            text = f"member {name}: {text}"
        return NodeRejections(plugin.name, text, 1)
    return NodeRejections("", f"member {name}: fits now", 1)
