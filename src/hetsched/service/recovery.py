"""Rebuilding the core from the store after a (re)start.

The store is the truth; the core is a cache. On start:

1. tasks that were being stopped are killed for good and their allocations freed;
2. tasks that were running are checked against the machine: a process with the recorded
   pid *and* start time is adopted; one that ended leaves its exit code in the wrapper's
   exit file; one with neither is lost (and fed to the core as a failure, so the job's
   restart policy decides);
3. running jobs get their recorded placements back in the core (no new scheduling
   decision); pending jobs are submitted again, in arrival order;
4. any process of this instance that no live task accounts for is killed (a crash between
   committing a Bind and recording its pid).

Usage is recomputed only from live allocations, never from finished jobs.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any

from sqlalchemy import update

from hetsched.agent.executor import Executor, task_key
from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError
from hetsched.model.job import Job
from hetsched.scheduler import (
    JobCancelled,
    JobRecord,
    JobSubmitted,
    Scheduler,
    TaskFinished,
)
from hetsched.service.loop import ControlLoop, placement_from_json, release_allocations
from hetsched.service.schemas import from_stored
from hetsched.service.tables import jobs, tasks

__all__ = ["recover", "restore_running_job"]

log = logging.getLogger(__name__)


def restore_running_job(
    core: Scheduler,
    job: Job,
    run: int,
    placements: dict[int, Placement],
    finished: set[int],
    restarts: int,
    started: float | None,
    now: float,
) -> JobRecord:
    """Put a running job back into the core with its recorded placements, without a new
    scheduling decision (``Scheduler.restore``: allocates under the core's task keys and
    charges the usage ledger; raises AllocationError and changes nothing if it cannot)."""
    return core.restore(job, run, placements, finished, restarts, started, now)


def recover(loop: ControlLoop, now: float | None = None) -> list[Any]:
    """Rebuild ``loop.core`` from the store; returns the events for the loop's first turn."""
    now = time.time() if now is None else now
    store, core, executor = loop.store, loop.core, loop.executor
    rows = store.live_jobs()
    live_tasks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for task_row in store.tasks_in(("starting", "running", "stopping")):
        live_tasks[task_row["job_id"]].append(task_row)
    succeeded: dict[str, set[int]] = {
        row["id"]: {
            int(t["task"])
            for t in store.job_tasks(row["id"])
            if t["run"] == row["run"] and t["state"] == "exited" and t["exit_code"] == 0
        }
        for row in rows
        if row["state"] == "running"
    }
    events: list[Any] = []
    submits: list[tuple[Job, int, int]] = []
    adopted: list[str] = []
    leaders = executor.find_leaders()
    with store.write() as conn:
        for row in rows:
            job_id = row["id"]
            spec = from_stored(row["spec"])
            job = spec.to_job(job_id, row["owner"], float(row["submitted_at"]))
            loop.specs[job_id] = spec
            run = int(row["run"])
            current = [t for t in live_tasks.get(job_id, []) if t["run"] == run]
            placements: dict[int, Placement] = {}
            finished = succeeded.get(job_id, set())
            outcomes: list[tuple[int, int | None, str]] = []
            for t in live_tasks.get(job_id, []):
                if t["state"] == "stopping" or t["run"] != run:
                    _finish_task(executor, conn, t, "stopped", now, "stopped during a restart")
            for t in current:
                if t["state"] == "stopping":
                    continue
                placements[int(t["task"])] = placement_from_json(t["placement"])
                deadline = None
                if job.max_runtime_s and t["started_at"]:
                    deadline = float(t["started_at"]) + job.max_runtime_s
                handle = None
                if t["state"] == "running" and t["pid"]:
                    handle = executor.adopt(
                        job_id, t["task"], run, t["pid"], t["pid_started"], deadline
                    )
                elif t["state"] == "starting":
                    # bound and perhaps spawned, but the pid was never recorded (a crash
                    # between the two commits): find the wrapper by the key it carries
                    leader = leaders.get(task_key(job_id, t["task"], run))
                    if leader is not None:
                        pid, pid_started = leader
                        if job.max_runtime_s:
                            deadline = pid_started + job.max_runtime_s
                        handle = executor.adopt(job_id, t["task"], run, pid, pid_started, deadline)
                        if handle is not None:
                            conn.execute(
                                update(tasks)
                                .where(tasks.c.id == t["id"])
                                .values(
                                    state="running",
                                    pid=pid,
                                    pid_started=pid_started,
                                    started_at=pid_started,
                                )
                            )
                if handle is not None:
                    adopted.append(handle.key)
                    continue
                code = executor.recorded_exit(job_id, t["task"], run)
                if code is not None:
                    outcomes.append((int(t["task"]), code, f"exit code {code}"))
                else:
                    outcomes.append(
                        (int(t["task"]), None, "lost: its process was gone after a restart")
                    )
            if row["state"] == "running" and placements:
                try:
                    restore_running_job(
                        core,
                        job,
                        run,
                        placements,
                        finished,
                        int(row["restarts"]),
                        row["started_at"],
                        now,
                    )
                except AllocationError as exc:
                    log.warning("job %s: cannot restore its placements: %s", job_id, exc)
                    for t in current:
                        if t["state"] in ("starting", "running"):
                            _finish_task(executor, conn, t, "lost", now, f"not restorable: {exc}")
                    submits.append((job, run, int(row["restarts"])))
                else:
                    loop.persisted[job_id] = len(core.jobs[job_id].history)
                    loop.run_offset[job_id] = 0
                    for task, code, reason in outcomes:
                        _mark_task(conn, job_id, task, run, code, reason, now)
                        events.append(TaskFinished(job_id, task, run, code == 0, reason))
            else:
                for t in current:
                    if t["state"] in ("starting", "running"):
                        _finish_task(executor, conn, t, "lost", now, "lost in a restart")
                submits.append((job, run, int(row["restarts"])))
            if row["cancel_requested"]:
                events.append(JobCancelled(job_id, "cancelled"))
        # before the releases above commit: kill what no live task accounts for
        executor.sweep(adopted)
    # pending jobs go through the core's ordinary submission path, in arrival order; their
    # runs continue the store's numbering through the offset
    resubmitted: list[Any] = []
    for job, run, _restarts in submits:
        loop.run_offset[job.id] = run
        loop.persisted[job.id] = 1
        resubmitted.append(JobSubmitted(job))
    loop.restarts_to_restore = {job.id: restarts for job, _run, restarts in submits}
    return [*resubmitted, *events]


def _mark_task(
    conn: Any, job_id: str, task: int, run: int, code: int | None, reason: str, now: float
) -> None:
    conn.execute(
        update(tasks)
        .where(tasks.c.job_id == job_id, tasks.c.task == task, tasks.c.run == run)
        .values(
            state="exited" if code is not None else "lost",
            exit_code=code,
            ended_at=now,
            reason=reason,
        )
    )
    release_allocations(conn, job_id, task, run, now)
    if code is not None:
        conn.execute(update(jobs).where(jobs.c.id == job_id).values(exit_code=code))


def _finish_task(
    executor: Executor, conn: Any, t: dict[str, Any], state: str, now: float, reason: str
) -> None:
    """Make sure the task's process is gone, then record it ended and free what it held."""
    if t["pid"]:
        handle = executor.adopt(t["job_id"], t["task"], t["run"], t["pid"], t["pid_started"], None)
        if handle is not None:
            executor.kill_now(handle.pid)
            del executor.handles[handle.key]
    conn.execute(
        update(tasks).where(tasks.c.id == t["id"]).values(state=state, ended_at=now, reason=reason)
    )
    release_allocations(conn, t["job_id"], t["task"], t["run"], now)
