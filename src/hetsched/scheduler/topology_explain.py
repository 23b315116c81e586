"""Why a job that asks for network domains waits, saying what would fit: "no rack has room
for 16 tasks (most: rack r3 with 12)", then the broader domain that holds them across
several: "block b1 has room for 20 across 2 racks: `preferred` would place it now".

Counts are per node how many of the job's tasks its free capacity holds (nodes that pass
the profile's filters only), summed per domain; they read the state the attempt saw.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hetsched.cluster.network import Network, fit_count
from hetsched.framework.cycle import CycleContext
from hetsched.framework.runtime import Framework
from hetsched.framework.status import Code, Status
from hetsched.model.device import Node
from hetsched.model.topology import TopologyRequest, short_level
from hetsched.scheduler.explain import Explanation, explain_placement
from hetsched.scheduler.topology import domain_room, unresolvable

__all__ = ["explain_topology", "topology_lines"]

IntArray = npt.NDArray[np.int64]


def explain_topology(
    framework: Framework, ctx: CycleContext, count: int, need: int, status: Status
) -> tuple[Code, Explanation]:
    """The explanation of a job with ``ctx.job.topology`` whose ``count`` tasks (at least
    ``need``) found no place."""
    topology = ctx.job.topology
    assert topology is not None
    net = ctx.state.network()
    problem = unresolvable(net, topology)
    if problem is not None or net is None:
        text = problem or "topology: the cluster declares no levels"
        return Code.UNRESOLVABLE, Explanation(Code.UNRESOLVABLE, text)
    base = explain_placement(framework, ctx, 0, need, status)
    if base.code is Code.UNRESOLVABLE:
        return base.code, base
    never = _never(net, ctx, topology, need)
    if never is not None:
        return Code.UNRESOLVABLE, Explanation(Code.UNRESOLVABLE, never)
    net.sync(ctx.state)
    fits = np.where(framework.feasible(ctx), fit_count(net.rows, ctx.request), 0)
    lines = topology_lines(net, ctx.state.nodes, topology, fits, max(count, need))
    return Code.UNSCHEDULABLE, Explanation(
        Code.UNSCHEDULABLE, lines[0], tuple(lines[1:]), base.rejections, base.suggestions
    )


def _never(net: Network, ctx: CycleContext, topology: TopologyRequest, need: int) -> str | None:
    """Why no domain of a required level could ever hold ``need`` tasks, or None."""
    depth = net.depth(topology.level)
    if topology.required is None or depth is None:
        return None
    room = domain_room(net, ctx, depth, empty=True)
    if room.size and room.max() >= need:
        return None
    level = short_level(topology.level)
    largest = (
        f" (largest: {level} {net.name(depth, int(room.argmax()), ctx.state.nodes)} with "
        f"{int(room.max())})"
        if room.size
        else ""
    )
    return (
        f"topology ({topology.describe()}): no {level} could hold its {need} tasks even "
        f"when empty{largest}"
    )


def _plural(level: str) -> str:
    return f"{level}s"


def topology_lines(
    net: Network, nodes: list[Node], topology: TopologyRequest, fits: IntArray, count: int
) -> list[str]:
    """The summary and the hint (see the module docstring); ``fits``: tasks per row."""
    depth = net.depth(topology.level)
    assert depth is not None
    level = short_level(topology.level)
    per = _per_domain(net, depth, fits)
    size, inner = topology.slice_size, topology.slice_required
    what = f"{count} tasks"
    if size is not None and inner is not None:
        inner_depth = net.depth(inner)
        assert inner_depth is not None
        slices = _per_domain(net, inner_depth, fits) // size
        up = net.ancestors(inner_depth, depth)
        per = np.bincount(up, weights=slices * size, minlength=net.size(depth)).astype(np.int64)
        what += f" in slices of {size}, each inside one {short_level(inner)}"
    best = int(per.argmax()) if per.size else 0
    most = int(per[best]) if per.size else 0
    if most >= count:
        summary = (
            f"no {level} takes its {what} now ({level} {net.name(depth, best, nodes)} has "
            f"room for {most} by free capacity, but they did not fit on its nodes)"
        )
    elif most:
        summary = f"no {level} has room for {what} (most: {level} "
        summary += f"{net.name(depth, best, nodes)} with {most})"
    else:
        summary = f"no {level} has room for any of its {what}"
    lines = [f"topology ({topology.describe()}): {summary}"]
    if topology.required is not None:
        hint = _broader(net, nodes, depth, per, count)
        if hint is not None:
            lines.append(hint)
    return lines


def _per_domain(net: Network, depth: int, fits: IntArray) -> IntArray:
    if depth == net.host:
        return fits.astype(np.int64)
    counts = np.bincount(net.of[depth], weights=fits, minlength=net.size(depth))
    return counts.astype(np.int64)


def _broader(net: Network, nodes: list[Node], depth: int, per: IntArray, count: int) -> str | None:
    """The narrowest broader domain that holds ``count`` tasks across several domains at
    ``depth`` (``per``: tasks per such domain), the fewest of them counted."""
    level = short_level(net.label(depth))
    for up in range(depth - 1, -2, -1):
        owner = net.ancestors(depth, up)
        total = np.bincount(owner, weights=per, minlength=1 if up < 0 else net.size(up))
        best = int(total.argmax())
        if total[best] < count:
            continue
        inside = np.sort(per[owner == best])[::-1]
        spans = int(np.searchsorted(np.cumsum(inside), count)) + 1
        where = "the cluster" if up < 0 else f"{short_level(net.label(up))} "
        where += "" if up < 0 else net.name(up, best, nodes)
        return (
            f"{where} has room for {int(total[best])} across {spans} {_plural(level)}: "
            "`preferred` would place it now"
        )
    return None
