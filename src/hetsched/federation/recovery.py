"""Rebuilding the federation's core from its store after a (re)start.

The store is the truth; the core is a cache:

1. each member whose inventory is on disk joins the core again as it was (same incarnation,
   same device ids), marked unreachable until it renews: it keeps its jobs, takes no new
   one, and is fenced if it does not answer before every task it ran has surely stopped
   (its lease's bound restarts at *now + lease*: any nonce named before was received
   before now);
2. running jobs are put back on their member with their recorded placement (no new
   decision), and their dispatches taken back: one whose member job id was never recorded
   is sent again with the same idempotency key (the member answers with the job it already
   made, or makes it); one being stopped is asked to stop again;
3. pending jobs are submitted again in arrival order, continuing their runs. A job with a
   dispatch still being stopped waits for it to end first, so it never runs twice at once;
4. cancellations asked before the restart are asked again.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError
from hetsched.controlplane import Store, from_stored
from hetsched.drivers import Exit
from hetsched.federation.dispatch import Dispatch
from hetsched.federation.jobs import as_one_task
from hetsched.federation.member import nodes_from_view
from hetsched.federation.members import UNREACHABLE, MemberState, member_node
from hetsched.federation.plugins import Book
from hetsched.federation.store import read_inventory
from hetsched.keys import TaskKey
from hetsched.model.job import Job
from hetsched.scheduler import Event, JobCancelled, JobSubmitted, NodeAdded, Scheduler

__all__ = ["Found", "recover"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Found:
    """What recovery found, for the loop's first turn."""

    events: list[Event] = field(default_factory=list)
    dispatches: list[Dispatch] = field(default_factory=list)
    exits: list[Exit] = field(default_factory=list)
    #: tasks the core holds again, with their placements (the interpreter adopts them)
    adopted: list[tuple[TaskKey, Placement]] = field(default_factory=list)
    #: job id -> its resubmission, held until its dispatches being stopped have ended
    parked: dict[str, JobSubmitted] = field(default_factory=dict)
    #: job id -> the submission as accepted
    submissions: dict[str, dict[str, Any]] = field(default_factory=dict)


def rejoin(core: Scheduler, members: Mapping[str, MemberState], book: Book, home: Path) -> None:
    """Step 1: members known from an earlier start join the core, marked unreachable."""
    nodes = []
    for state in members.values():
        inventory = read_inventory(home, state.name)
        if inventory is None or not inventory.nodes:
            continue
        state.inventory = nodes_from_view(inventory.nodes)
        state.incarnation = inventory.incarnation
        state.lapses = inventory.lapses
        state.bounds.fence_after_s = inventory.fence_after_s
        state.status, state.why, state.in_core = UNREACHABLE, "not heard from since a restart", True
        state.worker.incarnation = state.incarnation
        book.inventories[state.name] = state.inventory
        nodes.append(NodeAdded(member_node(state)))
    if nodes:
        core.handle(nodes, now=0.0)


def recover(
    store: Store, core: Scheduler, members: Mapping[str, MemberState], book: Book, now: float
) -> Found:
    """Steps 2 to 4 (see the module docstring); the members joined already."""
    found = Found()
    live_tasks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in store.tasks_in(("starting", "running", "stopping")):
        live_tasks[row["job_id"]].append(row)
    resubmit: list[JobSubmitted] = []
    for row in store.live_jobs():
        spec = from_stored(row["spec"])
        job = spec.to_job(row["id"], row["owner"], float(row["submitted_at"]))
        book.jobs[job.id] = job
        found.submissions[job.id] = dict(row["spec"])
        run, restarts = int(row["run"]), int(row["restarts"])
        tasks = live_tasks.get(job.id, [])
        _stopping(tasks, run, members, found)
        restored = row["state"] == "running" and _restore(
            core, job, row, tasks, members, found, now
        )
        if not restored:
            event = JobSubmitted(as_one_task(job), run, restarts)
            if any(d.stopping and d.key.job == job.id for d in found.dispatches):
                found.parked[job.id] = event
            else:
                resubmit.append(event)
        if row["cancel_requested"]:
            found.events.append(JobCancelled(job.id, "cancelled"))
    found.events[:0] = resubmit
    return found


def _dispatch(t: dict[str, Any], members: Mapping[str, MemberState]) -> Dispatch | None:
    state = members.get(str(t["node"]))
    if state is None or not state.in_core:
        return None
    member_job = t["placement"].get("member_job")
    key = TaskKey(str(t["job_id"]), int(t["task"]), int(t["run"]))
    return Dispatch(key, state.name, state.incarnation, member_job)


def _stopping(
    tasks: list[dict[str, Any]], run: int, members: Mapping[str, MemberState], found: Found
) -> None:
    """Dispatches being stopped (or of an earlier run) are stopped again."""
    for t in tasks:
        if t["state"] != "stopping" and t["run"] == run:
            continue
        dispatch = _dispatch(t, members)
        if dispatch is None:
            key = TaskKey(str(t["job_id"]), int(t["task"]), int(t["run"]))
            found.exits.append(Exit.of(key.job, key.task, key.run, None, True, "member gone"))
            continue
        dispatch.stopping = True
        found.dispatches.append(dispatch)


def _restore(
    core: Scheduler,
    job: Job,
    row: dict[str, Any],
    tasks: list[dict[str, Any]],
    members: Mapping[str, MemberState],
    found: Found,
    now: float,
) -> bool:
    """A running job back on its member's node, with its dispatch; False when it must be
    submitted again (its dispatch or its member is gone)."""
    run = int(row["run"])
    current = [t for t in tasks if t["run"] == run and t["state"] in ("starting", "running")]
    if not current:
        return False
    t = current[0]
    dispatch = _dispatch(t, members)
    if dispatch is None:
        return False
    placement = Placement.from_dict(t["placement"])
    try:
        core.restore(
            as_one_task(job), run, {0: placement}, (), int(row["restarts"]), row["started_at"], now
        )
    except AllocationError as exc:
        log.warning("job %s: cannot restore it on member %s: %s", job.id, dispatch.member, exc)
        dispatch.stopping = True
        found.dispatches.append(dispatch)
        return False
    found.adopted.append((dispatch.key, placement))
    found.dispatches.append(dispatch)
    return True
