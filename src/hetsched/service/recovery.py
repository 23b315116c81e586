"""Rebuilding the core from the store after a (re)start.

The store is the truth; the core is a cache. On start:

1. tasks that were being stopped are killed for good and their allocations freed;
2. tasks that were running are checked against the machine: a process with the recorded
   pid *and* start time is adopted; one that ended leaves its exit code in the wrapper's
   exit file; one with neither is lost (reported to the core as a failure, so the job's
   restart policy decides);
3. running jobs get their recorded placements back in the core (no new scheduling
   decision); pending jobs are submitted again, in arrival order, continuing their runs
   and restart counts;
4. any process of this instance that no live task accounts for is killed (a crash between
   committing a Bind and recording its pid).

:func:`recover` returns what it found (:class:`Recovered`); the reconcile loop hands it to
the planner and the launcher. It writes only through the store's methods.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from hetsched.agent.executor import Executor, TaskExit, task_key
from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError
from hetsched.keys import TaskKey
from hetsched.model.job import Job
from hetsched.scheduler import Event, JobCancelled, JobSubmitted, Scheduler
from hetsched.service.schemas import SubmitSpec, from_stored
from hetsched.service.store import Store

__all__ = ["Recovered", "recover"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Recovered:
    """What recovery found, for the loop's first turn."""

    #: resubmissions and cancellations asked before the restart
    events: list[Event] = field(default_factory=list)
    #: tasks of restored jobs that ended while the service was down
    exits: list[TaskExit] = field(default_factory=list)
    #: every live job and its spec
    jobs: list[tuple[Job, SubmitSpec]] = field(default_factory=list)
    #: tasks the core holds again (restored jobs), with their placements
    adopted: list[tuple[TaskKey, Placement]] = field(default_factory=list)
    #: executor keys of the processes adopted
    processes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Job:
    """One live job row, being recovered."""

    row: dict[str, Any]
    job: Job
    run: int
    placements: dict[int, Placement] = field(default_factory=dict)
    exits: list[TaskExit] = field(default_factory=list)


def recover(
    store: Store, core: Scheduler, executor: Executor, now: float | None = None
) -> Recovered:
    """Rebuild ``core`` from ``store``, with ``executor`` finding the tasks' processes."""
    now = time.time() if now is None else now
    found = Recovered()
    live_tasks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in store.tasks_in(("starting", "running", "stopping")):
        live_tasks[row["job_id"]].append(row)
    leaders = executor.find_leaders()
    resubmit: list[tuple[Job, int, int]] = []
    with store.write() as conn:
        for row in store.live_jobs():
            spec = from_stored(row["spec"])
            item = _Job(row, spec.to_job(row["id"], row["owner"], float(row["submitted_at"])), 0)
            item.run = int(row["run"])
            found.jobs.append((item.job, spec))
            rows = live_tasks.get(item.job.id, [])
            _check_tasks(store, conn, executor, leaders, item, rows, found, now)
            if not _restore(store, conn, core, executor, item, rows, found, now):
                resubmit.append((item.job, item.run, int(row["restarts"])))
            if row["cancel_requested"]:
                found.events.append(JobCancelled(item.job.id, "cancelled"))
        # before the releases above commit: kill what no live task accounts for
        executor.sweep(found.processes)
    # pending jobs go through the core's ordinary submission path, in arrival order,
    # continuing the store's numbering of their runs and restarts
    found.events[:0] = [JobSubmitted(job, run, restarts) for job, run, restarts in resubmit]
    return found


def _check_tasks(
    store: Store,
    conn: Connection,
    executor: Executor,
    leaders: dict[str, tuple[int, float]],
    item: _Job,
    rows: list[dict[str, Any]],
    found: Recovered,
    now: float,
) -> None:
    """Stop what was being stopped; adopt the current run's processes, or learn how they
    ended."""
    job, run = item.job, item.run
    for t in rows:
        if t["state"] == "stopping" or t["run"] != run:
            _finish_task(store, conn, executor, t, "stopped", now, "stopped during a restart")
    for t in rows:
        if t["state"] == "stopping" or t["run"] != run:
            continue
        task = int(t["task"])
        item.placements[task] = Placement.from_dict(t["placement"])
        handle = _adopt(store, conn, executor, leaders, job, t)
        if handle is not None:
            found.processes.append(handle)
            continue
        code = executor.recorded_exit(job.id, task, run)
        reason = f"exit code {code}" if code is not None else "lost: its process was gone"
        if code is None:
            reason += " after a restart"
        item.exits.append(TaskExit(job.id, task, run, code, False, reason))


def _adopt(
    store: Store,
    conn: Connection,
    executor: Executor,
    leaders: dict[str, tuple[int, float]],
    job: Job,
    t: dict[str, Any],
) -> str | None:
    """Adopt a task's process: by its recorded pid and start time, or (bound and perhaps
    spawned, but the pid never recorded: a crash between the two commits) by the key it
    carries. Returns the executor's key, or None if no process runs for it."""
    run, task = int(t["run"]), int(t["task"])
    deadline = None
    if job.max_runtime_s and t["started_at"]:
        deadline = float(t["started_at"]) + job.max_runtime_s
    if t["state"] == "running" and t["pid"]:
        handle = executor.adopt(job.id, task, run, t["pid"], t["pid_started"], deadline)
        return None if handle is None else handle.key
    if t["state"] != "starting":
        return None
    leader = leaders.get(task_key(job.id, task, run))
    if leader is None:
        return None
    pid, pid_started = leader
    if job.max_runtime_s:
        deadline = pid_started + job.max_runtime_s
    handle = executor.adopt(job.id, task, run, pid, pid_started, deadline)
    if handle is None:
        return None
    store.record_adopted(conn, t, pid, pid_started)
    return handle.key


def _restore(
    store: Store,
    conn: Connection,
    core: Scheduler,
    executor: Executor,
    item: _Job,
    rows: list[dict[str, Any]],
    found: Recovered,
    now: float,
) -> bool:
    """Put a running job back into the core on its recorded placements (no new decision);
    False when it must be submitted again (it was pending, or its placements no longer
    fit: then its tasks are lost)."""
    job, run, row = item.job, item.run, item.row
    current = [t for t in rows if t["run"] == run and t["state"] in ("starting", "running")]
    if row["state"] == "running" and item.placements:
        finished = {
            int(t["task"])
            for t in store.job_tasks(job.id)
            if t["run"] == run and t["state"] == "exited" and t["exit_code"] == 0
        }
        try:
            core.restore(
                job, run, item.placements, finished, int(row["restarts"]), row["started_at"], now
            )
        except AllocationError as exc:
            log.warning("job %s: cannot restore its placements: %s", job.id, exc)
            for t in current:
                _finish_task(store, conn, executor, t, "lost", now, f"not restorable: {exc}")
            return False
        found.adopted += [(TaskKey(job.id, t, run), p) for t, p in item.placements.items()]
        found.exits += item.exits
        return True
    for t in current:
        _finish_task(store, conn, executor, t, "lost", now, "lost in a restart")
    return False


def _finish_task(
    store: Store,
    conn: Connection,
    executor: Executor,
    t: dict[str, Any],
    state: str,
    now: float,
    reason: str,
) -> None:
    """Make sure the task's process is gone, then record that it ended and free what it
    held."""
    if t["pid"]:
        handle = executor.adopt(t["job_id"], t["task"], t["run"], t["pid"], t["pid_started"], None)
        if handle is not None:
            executor.kill_now(handle.pid)
            del executor.handles[handle.key]
    store.record_task_end(conn, t, state, now, reason)
