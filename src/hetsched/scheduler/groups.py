"""Heterogeneous jobs (``groups``) in words: what a group asks for, and why the gang of
groups did not place ("workers: 8 x 1 gpu fit; driver: no node has 8 free CPUs beside
them").

A job with groups is one gang of all its tasks, each with its group's request: the attempt
places the groups in order, and when a group's task finds no node it goes on with the next
group, so the explanation can say which groups fit and which did not beside them.
"""

from __future__ import annotations

from collections.abc import Mapping

from hetsched.framework.cycle import CycleContext
from hetsched.framework.runtime import Framework
from hetsched.framework.status import Code
from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import Job, TaskRequest
from hetsched.scheduler.explain import Explanation

__all__ = ["asks", "explain_groups"]


def _plural(count: float, word: str) -> str:
    return f"{count:g} {word}" + ("" if count == 1 else "s")


def asks(request: TaskRequest, free: str = "") -> str:
    """A request in a few words: ``1 gpu``, ``8 CPUs and 16384 MiB memory``; with ``free``
    ("free "), as room a node has: ``8 free CPUs``."""
    parts = []
    if request.cpu_milli:
        parts.append(_plural(request.cpu_milli / 1000, f"{free}CPU"))
    if request.memory_mib:
        parts.append(f"{request.memory_mib} MiB {free}memory")
    for device in request.devices:
        choice = device.primary
        if choice.share < SHARE_UNITS:
            parts.append(f"{choice.share}/{SHARE_UNITS} of a {free}{choice.device_class}")
        else:
            parts.append(f"{choice.count} {free}{choice.device_class}")
    return " and ".join(parts) or "nothing"


def explain_groups(
    framework: Framework,
    job: Job,
    contexts: Mapping[TaskRequest, CycleContext],
    placed: set[int],
    failed: Mapping[TaskRequest, int],
) -> Explanation:
    """Why the gang of ``job``'s groups did not place: per group, whether its tasks fit
    (``placed``: the tasks placed, still allocated) and, for the first group that did not,
    the filters' reasons as the nodes are with the others placed."""
    lines = []
    start = 0
    first: CycleContext | None = None
    for group in job.groups:
        tasks = range(start, start + group.replicas)
        start += group.replicas
        fitted = sum(1 for t in tasks if t in placed)
        if fitted == group.replicas:
            lines.append(f"{group.name}: {group.replicas} x {asks(group.resources)} fit")
            continue
        beside = " beside them" if placed else ""
        room = asks(group.resources, "free ")
        if fitted:
            lines.append(
                f"{group.name}: {fitted} of {group.replicas} fit, no node has {room}{beside}"
            )
        else:
            lines.append(f"{group.name}: no node has {room}{beside}")
        if first is None and group.resources in failed:
            first = contexts.get(group.resources)
    rejections = tuple(framework.diagnose(first)) if first is not None else ()
    summary = "; ".join(lines)
    reason = f"a gang of {len(job.groups)} groups, {job.replicas} tasks placed all or nothing"
    return Explanation(Code.UNSCHEDULABLE, summary, (reason,), rejections)
