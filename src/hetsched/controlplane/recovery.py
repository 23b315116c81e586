"""Rebuilding the core from the store after a (re)start, and checking that they agree.

The store is the truth; the core is a cache. On start (and after a failed loop turn):

1. every task the store holds in a non-terminal state (``starting``, ``running``,
   ``stopping`` or any other) is reconciled with the process table and its exit file;
   those that must not run on (they were being stopped, their job has ended, they belong
   to an earlier run, their state is one this code does not know) are killed for good and
   recorded ended, and what they held is released (once: only live rows are released).
   The exception is a task in its preemption notice: a stopping task of a checkpointable
   job that waits in the queue, in the run it was stopped in. Its process is adopted, its
   job taken back with the task still stopping (``Scheduler.restore_stopping``: it holds
   its devices until it ends), and its notice goes on to the deadline it was given (the
   job's requeue time, from its history, plus its ``notice_s``): :attr:`Recovered.stopping`.
   So is a job that was moving (a running job with ``reserved`` tasks of its next run,
   where it moves): its stopping tasks are adopted, its destination held again
   (``Scheduler.restore_moving``), its notice goes on to the Migrate's time (the reserved
   rows' bind) plus ``notice_s``, and its next run starts there once they have stopped
   (:attr:`Recovered.moving`); a reservation of a job that no longer moves is dropped;
2. tasks of running jobs are checked against the executor: a process with the recorded
   pid *and* start time is adopted, and so is one found by its task key when no pid was
   recorded (a crash between the two commits of a turn, or an executor that learns pids
   later: the Ray executor); one that ended leaves its exit code with the executor (the
   wrapper's exit file, the Ray task's actor); one with neither is lost (reported to the
   core as a failure, so the job's restart policy decides);
3. running jobs get their recorded placements back in the core (no new scheduling
   decision); pending jobs are submitted again, in arrival order, continuing their runs
   and restart counts;
4. any process of this instance that no live task accounts for is killed (a crash between
   committing a Bind and recording its pid), and any live allocation row that no restored
   task holds is released;
5. the store's live allocations and the core's are compared device by device and task by
   task: :class:`RecoveryError` says where they differ if they still do.

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

from hetsched.agent.executor import TaskExit, task_key
from hetsched.agent.protocol import ProcessExecutor
from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError
from hetsched.controlplane.schemas import SubmitSpec, from_stored
from hetsched.controlplane.storage.store import Store
from hetsched.controlplane.storage.turnstore import checkpoint_of
from hetsched.keys import TaskKey
from hetsched.model.job import Job
from hetsched.scheduler import Event, JobCancelled, JobSubmitted, Scheduler

__all__ = ["Noticed", "Recovered", "RecoveryError", "disagreements", "recover"]

#: task states in which a process may still run and an allocation may still be held
_LIVE_STATES = ("starting", "running")


class RecoveryError(RuntimeError):
    """The store and the core could not be made to agree on what is allocated: scheduling
    must not start (it would hand out a device the store says is held, or the reverse)."""


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
    #: tasks adopted in their notice (their jobs wait in the core with them stopping, or
    #: run moving)
    stopping: list[Noticed] = field(default_factory=list)
    #: the next run's tasks of jobs moving, held for them where they move
    moving: list[TaskKey] = field(default_factory=list)
    #: job id -> when its current run started and the time of its last checkpoint in that
    #: run (None: none), for the lost work of the runs adopted
    runs: dict[str, tuple[float, float | None]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Noticed:
    """A task adopted in its preemption notice: SIGTERM follows at ``deadline`` (unix time;
    at once if that has passed or the job checkpointed inside the notice already); its run
    was stopped at ``stopped_at``."""

    key: TaskKey
    placement: Placement
    deadline: float
    stopped_at: float
    reason: str
    #: False: its process ended while the service was down (its exit is in
    #: :attr:`Recovered.exits`): nothing to signal
    alive: bool = True


@dataclass(slots=True)
class _Job:
    """One live job row, being recovered."""

    row: dict[str, Any]
    job: Job
    run: int
    placements: dict[int, Placement] = field(default_factory=dict)
    exits: list[TaskExit] = field(default_factory=list)


def recover(
    store: Store, core: Scheduler, executor: ProcessExecutor, now: float | None = None
) -> Recovered:
    """Rebuild ``core`` from ``store``, with ``executor`` finding the tasks' processes;
    RecoveryError if the two disagree afterwards on what is allocated."""
    now = time.time() if now is None else now
    found = Recovered()
    live_rows = store.live_jobs()
    runs = {row["id"]: int(row["run"]) for row in live_rows}
    queued = store.queue_times()
    noticed = {row["id"] for row in live_rows if _in_notice(row)}
    live_tasks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    leaders = executor.find_leaders()
    resubmit: list[tuple[Job, int, int, Any]] = []
    unfinished = store.unfinished_tasks()
    moving = _moves(live_rows, unfinished)
    with store.write() as conn:
        for t in unfinished:
            if t["state"] == "reserved":
                if t["job_id"] not in moving:
                    store.drop_reserved(conn, t, now)
                continue
            kept = t["job_id"] in noticed or t["job_id"] in moving
            why = _must_end(t, runs.get(t["job_id"]), kept)
            if why is None:
                live_tasks[t["job_id"]].append(t)
            else:
                _end_task(store, conn, executor, leaders, t, now, why)
        for row in live_rows:
            spec = from_stored(row["spec"])
            item = _Job(row, spec.to_job(row["id"], row["owner"], float(row["submitted_at"])), 0)
            item.run = int(row["run"])
            found.jobs.append((item.job, spec))
            rows = live_tasks.get(item.job.id, [])
            if item.job.id in moving:
                reserved = moving[item.job.id]
                if not _keep_moving(
                    store, conn, core, executor, leaders, item, rows, reserved, found, now
                ):
                    resubmit.append(
                        (item.job, item.run, int(row["restarts"]), row.get("checkpoint"))
                    )
                continue
            if item.job.id in noticed:
                at = queued.get(item.job.id, now)
                if _keep_noticed(store, conn, core, executor, item, rows, found, at, now):
                    continue
                resubmit.append((item.job, item.run, int(row["restarts"]), row.get("checkpoint")))
                continue
            _check_tasks(store, conn, executor, leaders, item, rows, found, now)
            if not _restore(store, conn, core, executor, leaders, item, rows, found, now):
                resubmit.append((item.job, item.run, int(row["restarts"]), row.get("checkpoint")))
            if row["cancel_requested"]:
                found.events.append(JobCancelled(item.job.id, "cancelled"))
        # before the releases above commit: kill what no live task accounts for
        executor.sweep(found.processes)
        held = {key for key, _share in core.cluster.allocated_devices() if isinstance(key, TaskKey)}
        for row in store.release_unheld(conn, held, now):
            log.warning(
                "recovery: released allocation of %s on %s that no live task held",
                TaskKey(row["job_id"], row["task"], row["run"]),
                row["device_id"],
            )
    problems = disagreements(store.live_allocations(), core)
    if problems:
        raise RecoveryError(
            "the store and the scheduling core disagree on what is allocated after "
            "recovery; not scheduling: " + "; ".join(problems[:10])
        )
    # pending jobs go through the core's ordinary submission path, in arrival order,
    # continuing the store's numbering of their runs and restarts, and keeping their queue
    # time (so aging and their place in line continue); a job that was running and could
    # not be restored enters the queue now
    found.events[:0] = [
        JobSubmitted(job, run, restarts, queued.get(job.id), checkpoint_of(saved))
        for job, run, restarts, saved in resubmit
    ]
    return found


def _in_notice(row: dict[str, Any]) -> bool:
    """A job whose stopping tasks may be in their notice: it waits in the queue (preempted)
    and declares a notice."""
    if row["state"] != "pending":
        return False
    checkpoint = from_stored(row["spec"]).checkpoint
    return checkpoint is not None and checkpoint.notice_s > 0


def _keep_noticed(
    store: Store,
    conn: Connection,
    core: Scheduler,
    executor: ProcessExecutor,
    item: _Job,
    rows: list[dict[str, Any]],
    found: Recovered,
    stopped_at: float,
    now: float,
) -> bool:
    """Adopt the stopping tasks of a job in its notice (``rows``: the unfinished tasks of
    its run, stopped at ``stopped_at``) and take the job back waiting, with them stopping;
    False when none runs any more (the job is submitted again). A task that ended
    meanwhile is recorded stopped; one not stopping is lost."""
    job, run = item.job, item.run
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
            _finish_task(store, conn, executor, {}, t, state, now, "ended during a restart", code)
            continue
        stopping[task] = Placement.from_dict(t["placement"])
        handles.append(handle.key)
    if not stopping:
        return False
    restarts = int(item.row["restarts"])
    try:
        core.restore_stopping(job, run, stopping, restarts, stopped_at, now, saved)
    except AllocationError as exc:
        log.warning("job %s: cannot keep its stopping tasks: %s", job.id, exc)
        for t in rows:
            if int(t["task"]) in stopping:
                _finish_task(store, conn, executor, {}, t, "stopped", now, f"not restorable: {exc}")
        return False
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


def _moves(
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


def _keep_moving(
    store: Store,
    conn: Connection,
    core: Scheduler,
    executor: ProcessExecutor,
    leaders: dict[str, tuple[int, float]],
    item: _Job,
    rows: list[dict[str, Any]],
    reserved: list[dict[str, Any]],
    found: Recovered,
    now: float,
) -> bool:
    """Take back a job that was moving (``rows``: the unfinished tasks of its run, being
    stopped; ``reserved``: its next run's, where it moves) as it was: its destination held,
    its tasks stopping, their notice going on to the deadline it was given (the Migrate's
    time, when the reserved rows were bound, plus ``notice_s``). A task that ended meanwhile
    is reported stopped in the first turn, so the job arrives once the last has stopped.
    False when the move cannot be kept (its tasks are ended, its destination given up, and
    the job is submitted again)."""
    job, run, row = item.job, item.run, item.row
    if not rows:
        # nothing left to stop (never written so: an arrival and the last stop share a
        # turn), so no TaskStopped would ever start the next run: submitted again instead
        for t in reserved:
            store.drop_reserved(conn, t, now)
        return False
    saved = checkpoint_of(row.get("checkpoint"))
    stopping = {int(t["task"]): Placement.from_dict(t["placement"]) for t in rows}
    moving = {int(t["task"]): Placement.from_dict(t["placement"]) for t in reserved}
    moved_at = min(float(t["bound_at"]) for t in reserved)
    started = min(float(t["bound_at"]) for t in rows)
    try:
        core.restore_moving(
            job,
            run,
            stopping,
            moving,
            started,
            moved_at,
            now,
            int(row["restarts"]),
            saved,
            max(1, int(row.get("migrations") or 0)),
        )
    except AllocationError as exc:
        log.warning("job %s: cannot keep its move: %s", job.id, exc)
        for t in rows:
            _finish_task(
                store, conn, executor, leaders, t, "stopped", now, f"not restorable: {exc}"
            )
        for t in reserved:
            store.drop_reserved(conn, t, now)
        return False
    # a checkpoint reported inside the notice ended it already: SIGTERM now
    ended = saved is not None and saved.run == run and saved.time >= moved_at
    deadline = moved_at if ended else moved_at + job.notice_s
    for t in rows:
        task = int(t["task"])
        handle = _adopt_stopping(executor, leaders, job.id, t)
        if handle is None:
            code = executor.recorded_exit(job.id, task, run)
            found.exits.append(TaskExit(job.id, task, run, code, True, "ended during a restart"))
        else:
            found.processes.append(handle)
        key, placement = TaskKey(job.id, task, run), stopping[task]
        reason = "moving; its notice goes on after a restart"
        found.stopping.append(
            Noticed(key, placement, deadline, moved_at, reason, handle is not None)
        )
    found.moving += [TaskKey(job.id, task, run + 1) for task in sorted(moving)]
    checkpointed = saved.time if saved is not None and saved.run == run else None
    found.runs[job.id] = (started, checkpointed)
    return True


def _adopt_stopping(
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


def _must_end(t: dict[str, Any], job_run: int | None, noticed: bool = False) -> str | None:
    """Why a task the store holds unfinished must end now, or None if it may run on (a
    stopping task of a job in its notice, ``noticed``, runs on until its deadline)."""
    if job_run is None:
        return "its job had ended"
    if t["state"] == "stopping" and not (noticed and int(t["run"]) == job_run):
        return "it was being stopped"
    if t["state"] not in (*_LIVE_STATES, "stopping"):
        return f"unknown task state {t['state']!r}"
    if int(t["run"]) != job_run:
        return f"it belongs to run {t['run']}, not the job's current run {job_run}"
    return None


def _end_task(
    store: Store,
    conn: Connection,
    executor: ProcessExecutor,
    leaders: dict[str, tuple[int, float]],
    t: dict[str, Any],
    now: float,
    why: str,
) -> None:
    """A task that must not run on: its process killed, its end recorded with the exit
    code its wrapper wrote if any, what it held released."""
    state = "stopped" if t["state"] in ("stopping", *_LIVE_STATES) else "lost"
    code = executor.recorded_exit(t["job_id"], int(t["task"]), int(t["run"]))
    reason = f"stopped during a restart: {why}"
    if code is not None:
        reason += f" (exit code {code})"
    _finish_task(store, conn, executor, leaders, t, state, now, reason, code)


def disagreements(live: list[dict[str, Any]], core: Scheduler) -> list[str]:
    """Where the store's live allocation rows and the core's allocations differ: by device
    (the share held) and by task (the devices held). Empty when they agree."""
    store_by_device: dict[str, int] = defaultdict(int)
    store_keys: dict[TaskKey, set[str]] = defaultdict(set)
    for row in live:
        store_by_device[row["device_id"]] += int(row["share"])
        store_keys[TaskKey(row["job_id"], int(row["task"]), int(row["run"]))].add(row["device_id"])
    core_by_device: dict[str, int] = defaultdict(int)
    core_keys: dict[TaskKey, set[str]] = defaultdict(set)
    for key, share in core.cluster.allocated_devices():
        core_by_device[share.device_id] += share.share
        if isinstance(key, TaskKey):
            core_keys[key].add(share.device_id)
    problems = [
        f"device {device}: the store holds {store_by_device.get(device, 0)}/1000, "
        f"the core {core_by_device.get(device, 0)}/1000"
        for device in sorted(store_by_device.keys() | core_by_device.keys())
        if store_by_device.get(device, 0) != core_by_device.get(device, 0)
    ]
    problems += [
        f"task {key}: the store holds {sorted(store_keys.get(key, ()))}, "
        f"the core {sorted(core_keys.get(key, ()))}"
        for key in sorted(store_keys.keys() | core_keys.keys())
        if store_keys.get(key, set()) != core_keys.get(key, set())
    ]
    return problems


def _check_tasks(
    store: Store,
    conn: Connection,
    executor: ProcessExecutor,
    leaders: dict[str, tuple[int, float]],
    item: _Job,
    rows: list[dict[str, Any]],
    found: Recovered,
    now: float,
) -> None:
    """Adopt the current run's processes (``rows``: its unfinished tasks), or learn how
    they ended."""
    job, run = item.job, item.run
    for t in rows:
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
    executor: ProcessExecutor,
    leaders: dict[str, tuple[int, float]],
    job: Job,
    t: dict[str, Any],
) -> str | None:
    """Adopt a task's process: by its recorded pid and start time, or by the key it carries
    when no pid was recorded (bound and perhaps spawned, but the pid never recorded: a crash
    between the two commits; or recorded as running by an executor that learns pids later,
    such as the Ray executor). Returns the executor's key, or None if no process runs for
    it."""
    run, task = int(t["run"]), int(t["task"])
    deadline = None
    if job.max_runtime_s and t["started_at"]:
        deadline = float(t["started_at"]) + job.max_runtime_s
    if t["state"] == "running" and t["pid"]:
        handle = executor.adopt(job.id, task, run, t["pid"], t["pid_started"], deadline)
        return None if handle is None else handle.key
    if t["state"] not in _LIVE_STATES:
        return None
    leader = leaders.get(task_key(job.id, task, run))
    if leader is None:
        return None
    pid, pid_started = leader
    if job.max_runtime_s and deadline is None and pid_started:
        deadline = pid_started + job.max_runtime_s
    handle = executor.adopt(job.id, task, run, pid, pid_started, deadline)
    if handle is None:
        return None
    if t["state"] == "starting":
        store.record_adopted(conn, t, pid, pid_started)
    return handle.key


def _restore(
    store: Store,
    conn: Connection,
    core: Scheduler,
    executor: ProcessExecutor,
    leaders: dict[str, tuple[int, float]],
    item: _Job,
    rows: list[dict[str, Any]],
    found: Recovered,
    now: float,
) -> bool:
    """Put a running job back into the core on its recorded placements (no new decision);
    False when it must be submitted again (it was pending, or its placements no longer
    fit: then its tasks are lost)."""
    job, run, row = item.job, item.run, item.row
    if row["state"] == "running" and item.placements:
        finished = {
            int(t["task"])
            for t in store.job_tasks(job.id)
            if t["run"] == run and t["state"] == "exited" and t["exit_code"] == 0
        }
        try:
            core.restore(
                job,
                run,
                item.placements,
                finished,
                int(row["restarts"]),
                row["started_at"],
                now,
                checkpoint_of(row.get("checkpoint")),
            )
        except AllocationError as exc:
            log.warning("job %s: cannot restore its placements: %s", job.id, exc)
            for t in rows:
                reason = f"not restorable: {exc}"
                _finish_task(store, conn, executor, leaders, t, "lost", now, reason)
            return False
        found.adopted += [(TaskKey(job.id, t, run), p) for t, p in item.placements.items()]
        found.exits += item.exits
        saved = checkpoint_of(row.get("checkpoint"))
        if row["started_at"] is not None:
            checkpointed = saved.time if saved is not None and saved.run == run else None
            found.runs[job.id] = (float(row["started_at"]), checkpointed)
        return True
    for t in rows:
        _finish_task(store, conn, executor, leaders, t, "lost", now, "lost in a restart")
    return False


def _finish_task(
    store: Store,
    conn: Connection,
    executor: ProcessExecutor,
    leaders: dict[str, tuple[int, float]],
    t: dict[str, Any],
    state: str,
    now: float,
    reason: str,
    exit_code: int | None = None,
) -> None:
    """Make sure the task's process is gone (found by its recorded pid, else by its key),
    then record that it ended and free what it held. Its exit, if the executor reports one
    later, is stale: the task's row has ended already."""
    pid, started = t["pid"], t["pid_started"]
    leader = leaders.get(task_key(t["job_id"], int(t["task"]), int(t["run"])))
    if not (pid and started is not None) and leader is not None:
        pid, started = leader
    if (pid and started is not None) or leader is not None:
        handle = executor.adopt(t["job_id"], t["task"], t["run"], pid or 0, started or 0.0, None)
        if handle is not None:
            executor.kill(handle.key)
    store.record_task_end(conn, t, state, now, reason, exit_code)
