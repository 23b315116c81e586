"""Recovery of tasks in their notice: a preempted job whose stopping tasks have a notice to
go on with, and a job that was moving (see steps 1 and 2 of ``controlplane/recovery.py``).
Their processes are adopted and their jobs taken back as they were, so the notice ends at
the deadline it was first given."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from hetsched.agent.executor import task_key
from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError
from hetsched.controlplane.recovered import LiveJob, Noticed, RecoveryPass
from hetsched.controlplane.schemas import from_stored
from hetsched.controlplane.storage.turnstore import checkpoint_of
from hetsched.drivers.executor import Exit, ProcessExecutor
from hetsched.keys import TaskKey
from hetsched.scheduler import Scheduler

__all__ = ["in_notice", "keep_moving", "keep_noticed", "moves"]

log = logging.getLogger(__name__)


def in_notice(row: dict[str, Any]) -> bool:
    """A job whose stopping tasks may be in their notice: it waits in the queue (preempted)
    and declares a notice."""
    if row["state"] != "pending":
        return False
    checkpoint = from_stored(row["spec"]).checkpoint
    return checkpoint is not None and checkpoint.notice_s > 0


def keep_noticed(
    p: RecoveryPass, item: LiveJob, rows: list[dict[str, Any]], stopped_at: float
) -> bool:
    """Adopt the stopping tasks of a job in its notice (``rows``: the unfinished tasks of
    its run, stopped at ``stopped_at``) and take the job back waiting, with them stopping;
    False when none runs any more (the job is submitted again). A task that ended
    meanwhile is recorded stopped; one not stopping is lost."""
    job, run, executor = item.job, item.run, p.executor
    saved = checkpoint_of(item.row.get("checkpoint"))
    stopping: dict[int, Placement] = {}
    handles: list[str] = []
    for t in rows:
        task = int(t["task"])
        handle = None
        if t["state"] == "stopping" and t["pid"]:
            handle = executor.adopt(job.id, task, run, t["pid"], t["pid_started"], None)
        if handle is None:
            code = executor.recorded_exit(job.id, task, run)
            state = "stopped" if t["state"] == "stopping" else "lost"
            p.finish(t, state, "ended during a restart", code, by_key=False)
            continue
        stopping[task] = Placement.from_dict(t["placement"])
        handles.append(handle.key)
    if not stopping:
        return False
    restarts = int(item.row["restarts"])
    try:
        p.core.restore_stopping(job, run, stopping, restarts, stopped_at, p.now, saved)
    except AllocationError as exc:
        log.warning("job %s: cannot keep its stopping tasks: %s", job.id, exc)
        for t in rows:
            if int(t["task"]) in stopping:
                p.finish(t, "stopped", f"not restorable: {exc}", by_key=False)
        return False
    found = p.found
    found.processes += handles
    notice = job.notice_s
    # a checkpoint reported inside the notice ended it already: SIGTERM now
    ended = saved is not None and saved.run == run and saved.time >= stopped_at
    deadline = stopped_at if ended else stopped_at + notice
    reason = "preempted; its notice goes on after a restart"
    found.stopping += [
        Noticed(TaskKey(job.id, task, run), placement, deadline, stopped_at, reason)
        for task, placement in sorted(stopping.items())
    ]
    # the job's row forgets when the run started once it is requeued: its tasks' binds say
    started = min(float(t["bound_at"]) for t in rows if int(t["task"]) in stopping)
    checkpointed = saved.time if saved is not None and saved.run == run else None
    found.runs[job.id] = (started, checkpointed)
    return True


def moves(
    live_rows: list[dict[str, Any]], unfinished: list[dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """Jobs that were moving (a Migrate's notice in progress): running jobs with
    ``reserved`` tasks of their next run (where they move), with those rows."""
    runs = {row["id"]: int(row["run"]) for row in live_rows if row["state"] == "running"}
    reserved: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in unfinished:
        if t["state"] == "reserved" and runs.get(t["job_id"], -2) + 1 == int(t["run"]):
            reserved[t["job_id"]].append(t)
    return dict(reserved)


def keep_moving(
    p: RecoveryPass, item: LiveJob, rows: list[dict[str, Any]], reserved: list[dict[str, Any]]
) -> bool:
    """Take back a job that was moving (``rows``: the unfinished tasks of its run, being
    stopped; ``reserved``: its next run's, where it moves) as it was: its destination held,
    its tasks stopping, their notice going on to the deadline it was given (the Migrate's
    time, when the reserved rows were bound, plus ``notice_s``). A task that ended meanwhile
    is reported stopped in the first turn, so the job arrives once the last has stopped.
    False when the move cannot be kept (its tasks are ended, its destination given up, and
    the job is submitted again)."""
    job, run, row, found = item.job, item.run, item.row, p.found
    if not rows:
        # nothing left to stop (never written so: an arrival and the last stop share a
        # turn), so no TaskStopped would ever start the next run: submitted again instead
        for t in reserved:
            p.store.drop_reserved(p.conn, t, p.now)
        return False
    saved = checkpoint_of(row.get("checkpoint"))
    stopping = {int(t["task"]): Placement.from_dict(t["placement"]) for t in rows}
    moved_at = min(float(t["bound_at"]) for t in reserved)
    started = min(float(t["bound_at"]) for t in rows)
    problem = _restore_move(p.core, item, stopping, reserved, started, moved_at, p.now)
    if problem is not None:
        log.warning("job %s: cannot keep its move: %s", job.id, problem)
        for t in rows:
            why = f"not restorable: {problem}"
            p.finish(t, "stopped", why)
        for t in reserved:
            p.store.drop_reserved(p.conn, t, p.now)
        return False
    # a checkpoint reported inside the notice ended it already: SIGTERM now
    ended = saved is not None and saved.run == run and saved.time >= moved_at
    deadline = moved_at if ended else moved_at + job.notice_s
    for t in rows:
        task = int(t["task"])
        handle = adopt_stopping(p.executor, p.leaders, job.id, t)
        if handle is None:
            code = p.executor.recorded_exit(job.id, task, run)
            found.exits.append(Exit.of(job.id, task, run, code, True, "ended during a restart"))
        else:
            found.processes.append(handle)
        key, placement = TaskKey(job.id, task, run), stopping[task]
        reason = "moving; its notice goes on after a restart"
        found.stopping.append(
            Noticed(key, placement, deadline, moved_at, reason, handle is not None)
        )
    moving = sorted({int(t["task"]) for t in reserved})
    found.moving += [TaskKey(job.id, task, run + 1) for task in moving]
    checkpointed = saved.time if saved is not None and saved.run == run else None
    found.runs[job.id] = (started, checkpointed)
    return True


def _restore_move(
    core: Scheduler,
    item: LiveJob,
    stopping: dict[int, Placement],
    reserved: list[dict[str, Any]],
    started: float,
    moved_at: float,
    now: float,
) -> AllocationError | None:
    """The moving job back in ``core`` as it was (``Scheduler.restore_moving``); the error
    if its tasks or its destination cannot be held again."""
    row = item.row
    moving = {int(t["task"]): Placement.from_dict(t["placement"]) for t in reserved}
    try:
        core.restore_moving(
            item.job,
            item.run,
            stopping,
            moving,
            started,
            moved_at,
            now,
            int(row["restarts"]),
            checkpoint_of(row.get("checkpoint")),
            max(1, int(row.get("migrations") or 0)),
        )
    except AllocationError as exc:
        return exc
    return None


def adopt_stopping(
    executor: ProcessExecutor,
    leaders: dict[str, tuple[int, float]],
    job_id: str,
    t: dict[str, Any],
) -> str | None:
    """Adopt a stopping task's process, by its recorded pid or else by its key; the
    executor's key, or None when none runs."""
    task, run = int(t["task"]), int(t["run"])
    pid, started = t["pid"], t["pid_started"]
    if not pid:
        pid, started = leaders.get(task_key(job_id, task, run), (None, None))
    if not pid:
        return None
    handle = executor.adopt(job_id, task, run, int(pid), float(started or 0.0), None)
    return None if handle is None else handle.key
