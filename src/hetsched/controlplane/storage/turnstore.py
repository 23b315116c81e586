"""What the reconcile loop and recovery write: one transaction per turn, and the few writes
around launching and recovering tasks. Part of :class:`~hetsched.controlplane.storage.store.Store`
(which owns every SQL statement of the service); kept here so each module stays one concern.

A turn's record comes from the core's actions alone (its JobTransition, Pending and Preempt
actions, and the tasks its Binds and stops name), never from the core's books.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence, Set
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection, Update, and_, bindparam, delete, or_, select, update

from hetsched.agent.guard import Alert
from hetsched.cluster.placement import Placement
from hetsched.controlplane.launcher import Launched
from hetsched.controlplane.planner import TurnPlan
from hetsched.controlplane.storage.tables import allocations, jobs, tasks, transitions
from hetsched.controlplane.storage.workflowstore import record_elements
from hetsched.drivers import Exit, Start
from hetsched.keys import TaskKey
from hetsched.model.checkpoint import SavedCheckpoint
from hetsched.model.lifecycle import TERMINAL, JobState
from hetsched.scheduler import Change, JobTransition

__all__ = ["TurnRecords", "checkpoint_dict", "checkpoint_of", "release_allocations"]


class TurnRecords:
    """The loop's and recovery's writes (a part of Store, which provides ``write``)."""

    def write(self, durable: bool = True) -> AbstractContextManager[Connection]:
        raise NotImplementedError  # provided by Store

    def record_turn(
        self, exits: Sequence[Exit], plan: TurnPlan, starts_die_with_host: bool = False
    ) -> None:
        """One transaction: the exits reported this turn and the allocations they free,
        tasks asked to stop, new tasks and their allocations, preemptions, and each job's
        transitions, state and explanation.

        With ``starts_die_with_host`` (the tasks run on this machine), a turn that only
        starts tasks (and explains waiting jobs) is not made durable (``Store.write``): a
        power loss that loses it kills its tasks too, which leaves what recovery finds
        after a crash before the commit. Anything else a turn records (an exit, a stop, a
        job's end, a checkpoint) is durable before the turn goes on."""
        now = plan.now
        durable = not (starts_die_with_host and not exits and _only_starts(plan))
        with self.write(durable) as conn:
            record_elements(conn, plan.transitions)
            for exit_ in exits:
                _record_exit(conn, exit_, now)
            if plan.stops:
                conn.execute(_STOPPING, [_key_params(stop.key) for stop in plan.stops])
            if plan.reserved:
                _record_reserved(conn, plan.reserved, now)
            _record_starts(conn, plan.starts, now, plan.arrived)
            if plan.unreserved:
                _drop_reserved(conn, plan.unreserved, now)
            if plan.preempted:
                conn.execute(_PREEMPTED, [{"b_id": job_id} for job_id in plan.preempted])
            _record_checkpoints(conn, plan)
            _record_jobs(conn, plan)

    def record_launched(self, launched: Sequence[Launched], durable: bool = True) -> None:
        """The pids and start times of spawned tasks (``Launcher.launch``); ``durable=False``
        where the tasks run on this machine (a power loss ends them and their pids)."""
        if not launched:
            return
        with self.write(durable) as conn:
            conn.execute(
                _LAUNCHED,
                [
                    {
                        **_key_params(task.key),
                        "v_pid": task.pid,
                        "v_pid_started": task.pid_started,
                        "v_at": task.at,
                    }
                    for task in launched
                ],
            )

    def record_remote_start(self, key: TaskKey, remote_id: str, at: float) -> None:
        """The task ``key`` was accepted where it runs as ``remote_id`` (a federation's
        dispatch, accepted by its member as that member's job): it is running from ``at``,
        and its placement row keeps the id (``member_job``) so a restart finds it again."""
        with self.write() as conn:
            row = conn.execute(
                select(tasks.c.id, tasks.c.placement).where(
                    tasks.c.job_id == key.job, tasks.c.task == key.task, tasks.c.run == key.run
                )
            ).first()
            if row is None:
                return
            conn.execute(
                update(tasks)
                .where(tasks.c.id == row.id, tasks.c.state == "starting")
                .values(state="running", started_at=at)
            )
            placement = {**dict(row.placement), "member_job": remote_id}
            conn.execute(update(tasks).where(tasks.c.id == row.id).values(placement=placement))

    def record_alerts(self, alerts: Sequence[Alert]) -> None:
        """An overcommit alert goes into its job's history (``hetsched why``), where the
        job's state stays."""
        rows = [
            {
                "job_id": a.job_id,
                "time": a.time,
                "source": "running",
                "target": "running",
                "cause": f"overcommit guard: {a.message}",
            }
            for a in alerts
            if a.job_id
        ]
        if rows:
            with self.write() as conn:
                conn.execute(transitions.insert(), rows)

    def end_waiting_job(self, job_id: str, state: str, cause: str, now: float) -> bool:
        """End a job that waits outside the core (held back after failed turns): it is
        cancelled or failed with ``cause``. Only a pending job ends; False otherwise."""
        with self.write() as conn:
            result = conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.state == "pending")
                .values(state=state, reason=cause, ended_at=now, explanation=None)
            )
            if result.rowcount == 0:
                return False
            conn.execute(
                transitions.insert().values(
                    job_id=job_id, time=now, source="pending", target=state, cause=cause
                )
            )
        return True

    # -- recovery --------------------------------------------------------------------------

    def record_task_end(
        self,
        conn: Connection,
        row: dict[str, Any],
        state: str,
        now: float,
        reason: str,
        exit_code: int | None = None,
    ) -> None:
        """A task recovery found gone (or made sure is gone): it ended, what it held is free."""
        conn.execute(
            update(tasks)
            .where(tasks.c.id == row["id"])
            .values(state=state, ended_at=now, reason=reason, exit_code=exit_code)
        )
        release_allocations(conn, row["job_id"], row["task"], row["run"], now)

    def drop_reserved(self, conn: Connection, row: dict[str, Any], now: float) -> None:
        """A move recovery gives up: its reserved task goes, what it held is released."""
        _drop_reserved(conn, [TaskKey(row["job_id"], int(row["task"]), int(row["run"]))], now)

    def release_unheld(
        self, conn: Connection, held: Set[TaskKey], now: float
    ) -> list[dict[str, Any]]:
        """Release every live allocation whose task is not in ``held`` (what the core holds
        after recovery); returns the rows released."""
        rows = [
            dict(r._mapping)
            for r in conn.execute(select(allocations).where(allocations.c.live.is_(True))).all()
        ]
        stale = [r for r in rows if TaskKey(r["job_id"], r["task"], r["run"]) not in held]
        if stale:
            conn.execute(
                update(allocations)
                .where(allocations.c.id.in_([r["id"] for r in stale]))
                .values(live=None, released_at=now)
            )
        return stale

    def record_task_exit(self, conn: Connection, exit_: Exit, now: float) -> None:
        """A task that ended while the service was down (its exit file, or lost)."""
        _record_exit(conn, exit_, now)

    def record_adopted(self, conn: Connection, row: dict[str, Any], pid: int, at: float) -> None:
        """A task spawned just before a crash, found by its key: it runs."""
        conn.execute(
            update(tasks)
            .where(tasks.c.id == row["id"])
            .values(state="running", pid=pid, pid_started=at, started_at=at)
        )


def _only_starts(plan: TurnPlan) -> bool:
    """Whether the plan only starts tasks: binds, jobs becoming ``running``, explanations."""
    if plan.stops or plan.preempted or plan.migrated or plan.checkpoints or plan.lost:
        return False
    return all(
        t.change is Change.SUBMITTED or t.target is JobState.RUNNING for t in plan.transitions
    )


def release_allocations(conn: Connection, job_id: str, task: int, run: int, now: float) -> None:
    conn.execute(
        update(allocations)
        .where(
            and_(
                allocations.c.job_id == job_id,
                allocations.c.task == task,
                allocations.c.run == run,
                allocations.c.live.is_(True),
            )
        )
        .values(live=None, released_at=now)
    )


def _record_exit(conn: Connection, exit_: Exit, now: float) -> None:
    """Record a task's end. A stale exit (its task ended already: one recovery killed, an
    earlier report) changes nothing, not even its job's exit code."""
    state = "stopped" if exit_.stopped else ("exited" if exit_.exit_code is not None else "lost")
    key = _key_params(TaskKey(exit_.job_id, exit_.task, exit_.run))
    values = {"v_state": state, "v_at": now, "v_code": exit_.exit_code, "v_reason": exit_.reason}
    ended = conn.execute(_ENDED, {**key, **values})
    if ended.rowcount == 0:
        return
    conn.execute(_RELEASED, {**key, "v_at": now})
    if not exit_.stopped and exit_.exit_code is not None:
        code = {"b_id": exit_.job_id, "v_exit_code": exit_.exit_code}
        conn.execute(_update_statement(("exit_code",)), code)


def _record_reserved(
    conn: Connection, reserved: Sequence[tuple[TaskKey, Placement]], now: float
) -> None:
    """Where moving jobs go: their next run's tasks, ``reserved`` (no process yet), bound
    at the Migrate's time, and the allocations they hold from then on."""
    why = "where its job moves: starts once the run before has stopped"
    rows, held = _task_rows(reserved, "reserved", now, why)
    for key, placement in reserved:  # a resize's kept task carries its devices over
        before = _key_params(TaskKey(key.job, key.task, key.run - 1))
        devices = [d.device_id for d in placement.devices]
        if devices:
            conn.execute(_CARRIED, {**before, "v_at": now, "v_devices": devices})
    conn.execute(tasks.insert(), rows)
    if held:
        conn.execute(allocations.insert(), held)


def _drop_reserved(conn: Connection, keys: Sequence[TaskKey], now: float) -> None:
    """Moves given up: their reserved tasks never ran, so they go (a later run may take
    the same key); what they held is released, and stays in the allocation history."""
    params = [_key_params(key) for key in keys]
    conn.execute(_UNRESERVED, params)
    conn.execute(_RELEASED, [{**p, "v_at": now} for p in params])


def _record_starts(
    conn: Connection, starts: Sequence[Start], now: float, arrived: Set[TaskKey] = frozenset()
) -> None:
    """The new tasks, ``starting``, and the allocations their placements take; a task
    that ``arrived`` where its job moved takes up its reserved row, which holds its
    allocations already."""
    if not starts:
        return
    if arrived:
        taken = [_key_params(s.key) | {"v_at": now} for s in starts if s.key in arrived]
        conn.execute(_ARRIVED, taken)
        starts = [s for s in starts if s.key not in arrived]
    rows, held = _task_rows([(s.key, s.placement) for s in starts], "starting", now)
    if rows:
        conn.execute(tasks.insert(), rows)
    if held:
        conn.execute(allocations.insert(), held)


def _task_rows(
    placed: Sequence[tuple[TaskKey, Placement]], state: str, now: float, reason: str = ""
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Task rows in ``state``, bound ``now``, and the allocation rows their placements
    take."""
    rows: list[dict[str, Any]] = []
    held: list[dict[str, Any]] = []
    for key, placement in placed:
        ids = {"job_id": key.job, "task": key.task, "run": key.run}
        rows.append(
            {
                **ids,
                "node": placement.node,
                "placement": placement.to_dict(),
                "state": state,
                "bound_at": now,
                "reason": reason,
            }
        )
        held += [
            {**ids, "device_id": d.device_id, "share": d.share, "allocated_at": now, "live": True}
            for d in placement.devices
        ]
    return rows, held


def _record_checkpoints(conn: Connection, plan: TurnPlan) -> None:
    """Each job's last checkpoint (a new run starts from its Bind's, none: from scratch),
    the work lost by its stopped runs, and its moves."""
    if plan.starts:
        conn.execute(
            _update_statement(("checkpoint",)),
            [
                {
                    "b_id": start.key.job,
                    "v_checkpoint": None if start.resume is None else checkpoint_dict(start.resume),
                }
                for start in plan.starts
            ],
        )
    for report in plan.checkpoints:
        saved = SavedCheckpoint(
            plan.now if report.at is None else report.at, report.run, report.step, report.path
        )
        conn.execute(
            update(jobs).where(jobs.c.id == report.job_id).values(checkpoint=checkpoint_dict(saved))
        )
    for job_id, _run, lost in plan.lost:
        conn.execute(
            update(jobs).where(jobs.c.id == job_id).values(lost_work_s=jobs.c.lost_work_s + lost)
        )
    for job_id in plan.migrated:
        conn.execute(
            update(jobs).where(jobs.c.id == job_id).values(migrations=jobs.c.migrations + 1)
        )


def checkpoint_dict(saved: SavedCheckpoint) -> dict[str, Any]:
    """A checkpoint as the store keeps it (``jobs.checkpoint``)."""
    return {"time": saved.time, "run": saved.run, "step": saved.step, "path": saved.path}


def checkpoint_of(value: Any) -> SavedCheckpoint | None:
    """The checkpoint a ``jobs.checkpoint`` value holds (None for none or a bad value)."""
    if not isinstance(value, dict):
        return None
    try:
        step = value.get("step")
        return SavedCheckpoint(
            float(value["time"]),
            int(value["run"]),
            None if step is None else int(step),
            str(value.get("path") or ""),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _record_jobs(conn: Connection, plan: TurnPlan) -> None:
    """Each job's new transitions (the submission's was written by the API), and its row as
    they leave it; then the explanations of jobs that wait."""
    rows: list[dict[str, Any]] = []
    values: dict[str, dict[str, Any]] = {}
    for change in plan.transitions:
        if change.change is not Change.SUBMITTED:
            rows.append(_transition_row(change))
        values.setdefault(change.job_id, {}).update(_row_values(change))
    if rows:
        conn.execute(transitions.insert(), rows)
    for job_id, pending in plan.explanations.items():
        explained = values.setdefault(job_id, {})
        explained["explanation"] = None if pending is None else pending.explanation.to_dict()
    # one executemany per set of columns changed: a statement built per job cost more than
    # the writes themselves when thousands of jobs wait
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    firsts: list[dict[str, Any]] = []
    for job_id, changed in values.items():
        first = changed.pop("first_started_at", None)
        if changed:
            row = {f"v_{name}": value for name, value in changed.items()}
            row["b_id"] = job_id
            groups.setdefault(tuple(sorted(changed)), []).append(row)
        if first is not None:
            firsts.append({"b_id": job_id, "v_first": first})
    for names, group in groups.items():
        conn.execute(_update_statement(names), group)
    if firsts:
        conn.execute(
            update(jobs)
            .where(jobs.c.id == bindparam("b_id"), jobs.c.first_started_at.is_(None))
            .values(first_started_at=bindparam("v_first")),
            firsts,
        )


@functools.lru_cache(maxsize=64)
def _update_statement(names: tuple[str, ...]) -> Update:
    """``UPDATE jobs SET <names> WHERE id = :b_id`` with ``v_<name>`` parameters."""
    return (
        update(jobs)
        .where(jobs.c.id == bindparam("b_id"))
        .values({name: bindparam(f"v_{name}") for name in names})
    )


def _key_params(key: TaskKey) -> dict[str, Any]:
    return {"b_job": key.job, "b_task": key.task, "b_run": key.run}


def _task_is(table: Any) -> Any:
    """``WHERE`` a row of ``table`` (tasks, allocations) belongs to the task of the
    ``b_job``, ``b_task``, ``b_run`` parameters."""
    return and_(
        table.c.job_id == bindparam("b_job"),
        table.c.task == bindparam("b_task"),
        table.c.run == bindparam("b_run"),
    )


# The turn's statements, built once: building a statement per row cost more than running
# it (each row's values are parameters).
_STOPPING = (
    update(tasks)
    # no IN (...): an expanding parameter cannot go into an executemany
    .where(_task_is(tasks), or_(tasks.c.state == "starting", tasks.c.state == "running"))
    .values(state="stopping")
)
_LAUNCHED = (
    update(tasks)
    .where(_task_is(tasks), tasks.c.state == "starting")
    .values(
        state="running",
        pid=bindparam("v_pid"),
        pid_started=bindparam("v_pid_started"),
        started_at=bindparam("v_at"),
    )
)
_ENDED = (
    update(tasks)
    .where(_task_is(tasks), tasks.c.ended_at.is_(None))
    .values(
        state=bindparam("v_state"),
        ended_at=bindparam("v_at"),
        exit_code=bindparam("v_code"),
        reason=bindparam("v_reason"),
    )
)
_RELEASED = (
    update(allocations)
    .where(_task_is(allocations), allocations.c.live.is_(True))
    .values(live=None, released_at=bindparam("v_at"))
)
#: what a resized job's kept task held in the run before, on the devices it keeps
_CARRIED = _RELEASED.where(allocations.c.device_id.in_(bindparam("v_devices", expanding=True)))
_ARRIVED = (
    update(tasks)
    .where(_task_is(tasks), tasks.c.state == "reserved")
    .values(state="starting", bound_at=bindparam("v_at"), reason="")
)
_UNRESERVED = delete(tasks).where(_task_is(tasks), tasks.c.state == "reserved")
_PREEMPTED = (
    update(jobs).where(jobs.c.id == bindparam("b_id")).values(preemptions=jobs.c.preemptions + 1)
)


_COUNTED = frozenset({Change.STARTED, Change.RESIZED})


def _transition_row(change: JobTransition) -> dict[str, Any]:
    return {
        "job_id": change.job_id,
        "time": change.time,
        "source": None if change.source is None else change.source.value,
        "target": change.target.value,
        "cause": change.cause,
        # an elastic job's count, where it took effect: a start, a resize done
        "count": change.replicas if change.change in _COUNTED and change.replicas else None,
    }


def _row_values(change: JobTransition) -> dict[str, Any]:
    """What the job's row says after ``change``."""
    if change.change is Change.SUBMITTED:
        return {}
    out: dict[str, Any] = {
        "state": change.target.value,
        "reason": change.cause,
        "run": change.run,
        "restarts": change.restarts,
    }
    if change.target is JobState.RUNNING:
        out.update(started_at=change.time, first_started_at=change.time, explanation=None)
    elif change.target is JobState.PENDING:
        out["started_at"] = None
    elif change.target in TERMINAL:
        out.update(ended_at=change.time, explanation=None)
    return out
