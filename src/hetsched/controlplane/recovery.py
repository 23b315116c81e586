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
   and restart counts (one whose cancel was asked for ends cancelled instead);
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
from typing import Any

from hetsched.agent.executor import Executor, task_key
from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError
from hetsched.controlplane.notices import in_notice, keep_moving, keep_noticed, moves
from hetsched.controlplane.recovered import LIVE_STATES, LiveJob, Noticed, Recovered, RecoveryPass
from hetsched.controlplane.schemas import from_stored
from hetsched.controlplane.storage.store import Store
from hetsched.controlplane.storage.turnstore import checkpoint_of
from hetsched.drivers.executor import Exit, ProcessExecutor
from hetsched.keys import TaskKey
from hetsched.model.job import Job
from hetsched.scheduler import JobCancelled, JobSubmitted, Scheduler

__all__ = ["Noticed", "Recovered", "RecoveryError", "disagreements", "recover"]


class RecoveryError(RuntimeError):
    """The store and the core could not be made to agree on what is allocated: scheduling
    must not start (it would hand out a device the store says is held, or the reverse)."""


log = logging.getLogger(__name__)


def recover(
    store: Store, core: Scheduler, executor: ProcessExecutor, now: float | None = None
) -> Recovered:
    """Rebuild ``core`` from ``store``, with ``executor`` finding the tasks' processes;
    RecoveryError if the two disagree afterwards on what is allocated."""
    now = time.time() if now is None else now
    live_rows = store.live_jobs()
    unfinished = store.unfinished_tasks()
    noticed = {row["id"] for row in live_rows if in_notice(row)}
    moving = moves(live_rows, unfinished)
    leaders = executor.find_leaders()
    with store.write() as conn:
        found, queued = Recovered(), store.queue_times()
        p = RecoveryPass(store, conn, core, executor, leaders, found, now, queued, noticed, moving)
        live_tasks = _sort_tasks(p, unfinished, {r["id"]: int(r["run"]) for r in live_rows})
        for row in live_rows:
            _recover_job(p, row, live_tasks.get(row["id"], []))
        # before the releases above commit: kill what no live task accounts for
        executor.sweep(p.found.processes)
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
    p.resubmit = [again for again in p.resubmit if not _ran_unrecorded(p, *again[:2])]
    for job_id in p.cancelled:
        p.store.end_waiting_job(job_id, "cancelled", "cancelled (asked before a restart)", now)
    # pending jobs go through the core's ordinary submission path, in arrival order,
    # continuing the store's numbering of their runs and restarts, and keeping their queue
    # time (so aging and their place in line continue); a job that was running and could
    # not be restored enters the queue now
    p.found.events[:0] = [
        JobSubmitted(job, run, restarts, p.queued.get(job.id), checkpoint_of(saved))
        for job, run, restarts, saved in p.resubmit
    ]
    return p.found


def _ran_unrecorded(p: RecoveryPass, job: Job, run: int) -> bool:
    """Whether the job the store has waiting ran its next run to success all the same: the
    store lost that run's record (a filesystem that dropped writes it had acknowledged)
    while every task's exit status survived (exit files, the exit journal). Such a job ends
    succeeded here instead of running again; any other finding schedules it as usual."""
    after = run + 1
    codes = [p.executor.recorded_exit(job.id, task, after) for task in range(job.replicas)]
    if any(code != 0 for code in codes):
        return False
    cause = (
        f"all tasks succeeded (run {after}, whose record the store lost; their exit "
        "statuses survived it)"
    )
    if not p.store.end_waiting_job(job.id, "succeeded", cause, p.now):
        return False
    log.warning("recovery: job %s: %s", job.id, cause)
    return True


def _sort_tasks(
    p: RecoveryPass, unfinished: list[dict[str, Any]], runs: dict[str, int]
) -> dict[str, list[dict[str, Any]]]:
    """Step 1: end the tasks that must not run on (and drop reservations of jobs no longer
    moving); returns the rest, by job."""
    live_tasks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in unfinished:
        if t["state"] == "reserved":
            if t["job_id"] not in p.moving:
                p.store.drop_reserved(p.conn, t, p.now)
            continue
        kept = t["job_id"] in p.noticed or t["job_id"] in p.moving
        why = _must_end(t, runs.get(t["job_id"]), kept)
        if why is None:
            live_tasks[t["job_id"]].append(t)
        else:
            _end_task(p, t, why)
    return live_tasks


def _recover_job(p: RecoveryPass, row: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Steps 2 and 3 for one live job (``rows``: its tasks that may run on)."""
    waiting = row["state"] == "pending" and not rows and row["id"] not in p.noticed
    if waiting and row["cancel_requested"] and row["id"] not in p.moving:
        # not submitted again: a cancel given with it would come first in the core's
        # batch (cancels before arrivals) and find no job, and the job would run
        p.cancelled.append(row["id"])
        return
    spec = from_stored(row["spec"])
    item = LiveJob(row, spec.to_job(row["id"], row["owner"], float(row["submitted_at"])), 0)
    item.run = int(row["run"])
    p.found.jobs.append((item.job, spec))
    again = (item.job, item.run, int(row["restarts"]), row.get("checkpoint"))
    if item.job.id in p.moving:
        if not keep_moving(p, item, rows, p.moving[item.job.id]):
            p.resubmit.append(again)
        return
    if item.job.id in p.noticed:
        if not keep_noticed(p, item, rows, p.queued.get(item.job.id, p.now)):
            p.resubmit.append(again)
        return
    _check_tasks(p, item, rows)
    if not _restore(p, item, rows):
        p.resubmit.append(again)
    if row["cancel_requested"]:
        p.found.events.append(JobCancelled(item.job.id, "cancelled"))


def _must_end(t: dict[str, Any], job_run: int | None, noticed: bool = False) -> str | None:
    """Why a task the store holds unfinished must end now, or None if it may run on (a
    stopping task of a job in its notice, ``noticed``, runs on until its deadline)."""
    if job_run is None:
        return "its job had ended"
    if t["state"] == "stopping" and not (noticed and int(t["run"]) == job_run):
        return "it was being stopped"
    if t["state"] not in (*LIVE_STATES, "stopping"):
        return f"unknown task state {t['state']!r}"
    if int(t["run"]) != job_run:
        return f"it belongs to run {t['run']}, not the job's current run {job_run}"
    return None


def _end_task(p: RecoveryPass, t: dict[str, Any], why: str) -> None:
    """A task that must not run on: its process killed, its end recorded with the exit
    code its wrapper wrote if any, what it held released."""
    state = "stopped" if t["state"] in ("stopping", *LIVE_STATES) else "lost"
    code = p.executor.recorded_exit(t["job_id"], int(t["task"]), int(t["run"]))
    reason = f"stopped during a restart: {why}"
    if code is not None:
        reason += f" (exit code {code})"
    p.finish(t, state, reason, code)


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


def _check_tasks(p: RecoveryPass, item: LiveJob, rows: list[dict[str, Any]]) -> None:
    """Adopt the current run's processes (``rows``: its unfinished tasks), or learn how
    they ended."""
    job, run = item.job, item.run
    for t in rows:
        task = int(t["task"])
        item.placements[task] = Placement.from_dict(t["placement"])
        handle = _adopt(p, job, t)
        if handle is not None:
            p.found.processes.append(handle)
            continue
        code = p.executor.recorded_exit(job.id, task, run)
        if code is None and _never_spawned(p.executor, job.id, t):
            # bound, but the service stopped before spawning it: the run goes back to the
            # queue, no failure counted (the command never ran)
            reason = "not started: the service stopped before it spawned the task"
            item.exits.append(Exit.of(job.id, task, run, None, False, reason, not_started=True))
            continue
        reason = f"exit code {code}" if code is not None else "lost: its process was gone"
        if code is None:
            reason += " after a restart"
        item.exits.append(Exit.of(job.id, task, run, code, False, reason))


def _never_spawned(executor: ProcessExecutor, job_id: str, t: dict[str, Any]) -> bool:
    """A local task bound (``starting``, no pid) whose exit file is missing or empty: the
    executor makes it before it spawns the wrapper, and the wrapper writes ``started`` in
    it before it runs the command, so the command surely never ran."""
    if not isinstance(executor, Executor) or t["state"] != "starting" or t["pid"]:
        return False
    return executor.never_ran(job_id, int(t["task"]), int(t["run"]))


def _adopt(p: RecoveryPass, job: Job, t: dict[str, Any]) -> str | None:
    """Adopt a task's process: by its recorded pid and start time, or by the key it carries
    when no pid was recorded (bound and perhaps spawned, but the pid never recorded: a crash
    between the two commits; or recorded as running by an executor that learns pids later,
    such as the Ray executor). Returns the executor's key, or None if no process runs for
    it."""
    run, task = int(t["run"]), int(t["task"])
    deadline = None
    if job.max_runtime_s and t["started_at"]:
        deadline = float(t["started_at"]) + job.max_runtime_s
    executor = p.executor
    if t["state"] == "running" and t["pid"]:
        handle = executor.adopt(job.id, task, run, t["pid"], t["pid_started"], deadline)
        return None if handle is None else handle.key
    if t["state"] not in LIVE_STATES:
        return None
    leader = p.leaders.get(task_key(job.id, task, run))
    if leader is None:
        return None
    pid, pid_started = leader
    if job.max_runtime_s and deadline is None and pid_started:
        deadline = pid_started + job.max_runtime_s
    handle = executor.adopt(job.id, task, run, pid, pid_started, deadline)
    if handle is None:
        return None
    if t["state"] == "starting":
        p.store.record_adopted(p.conn, t, pid, pid_started)
    return handle.key


def _restore(p: RecoveryPass, item: LiveJob, rows: list[dict[str, Any]]) -> bool:
    """Put a running job back into the core on its recorded placements (no new decision);
    False when it must be submitted again (it was pending, or its placements no longer
    fit: then its tasks are lost)."""
    job, run, row, found = item.job, item.run, item.row, p.found
    if row["state"] == "running" and item.placements:
        finished = {
            int(t["task"])
            for t in p.store.job_tasks(job.id)
            if t["run"] == run and t["state"] == "exited" and t["exit_code"] == 0
        }
        try:
            p.core.restore(
                job,
                run,
                item.placements,
                finished,
                int(row["restarts"]),
                row["started_at"],
                p.now,
                checkpoint_of(row.get("checkpoint")),
            )
        except AllocationError as exc:
            log.warning("job %s: cannot restore its placements: %s", job.id, exc)
            for t in rows:
                p.finish(t, "lost", f"not restorable: {exc}")
            return False
        found.adopted += [(TaskKey(job.id, t, run), p) for t, p in item.placements.items()]
        found.exits += item.exits
        saved = checkpoint_of(row.get("checkpoint"))
        if row["started_at"] is not None:
            checkpointed = saved.time if saved is not None and saved.run == run else None
            found.runs[job.id] = (float(row["started_at"]), checkpointed)
        return True
    for t in rows:
        p.finish(t, "lost", "lost in a restart")
    return False
