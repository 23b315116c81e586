"""Carrying a round out in the core: the actions that realise a round's assignment.

:mod:`hetsched.scheduler.round_mode` decides, at a boundary, the model each round job runs
on; here a running job that gets no device is stopped (``Preempt``, kind ``round``), one
given another model is moved (``Migrate``, kind ``round``) when its destination is free
now, else stopped and placed there once the devices are free, and a waiting job given a
model is placed on it (``Bind``) as soon as its devices are free. Placement on a model runs
the profile's filters and scores over the nodes that hold that model
(``Framework.select`` with a node mask), so a job lands where the profile would put it
among them.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError, ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.profile import RoundsSpec
from hetsched.framework.status import PluginError
from hetsched.keys import TaskKey
from hetsched.model.lifecycle import JobState
from hetsched.rounds.problem import IntArray
from hetsched.scheduler.actions import MigrationKind
from hetsched.scheduler.books import Books
from hetsched.scheduler.records import JobRecord

__all__ = ["RoundPlan", "model_rows", "realise", "start_chosen"]

BoolArray = np.ndarray[Any, np.dtype[np.bool_]]


class RoundPlan(Protocol):
    """What carrying a round out reads and keeps of the core's round state
    (:class:`~hetsched.scheduler.round_mode.RoundBook` has it)."""

    spec: RoundsSpec
    #: this round's choices still to start: job -> model
    plan: dict[str, str]
    #: the boundary the round started at
    last_at: float | None


def model_rows(state: ClusterState, device_class: str, model: str) -> np.ndarray:
    """Node rows holding a healthy device of ``model`` (cached until the topology or
    health changes)."""

    def compute() -> np.ndarray:
        per_kind = np.array(
            [k.device_class == device_class and k.model == model for k in state.kinds] + [False]
        )
        rows = (per_kind[state.dev_kind] & state.dev_healthy).any(axis=1) & state.active
        return np.asarray(rows, np.bool_)

    return state.memo(("round_rows", device_class, model), compute)


def realise(
    sched: Books,
    book: RoundPlan,
    records: list[JobRecord],
    models: tuple[str, ...],
    assignment: IntArray,
    current: IntArray,
    pinned: BoolArray,
    now: float,
) -> None:
    """Stops first (their devices free once they have stopped), then moves to devices free
    now, then the round's choices wait in ``plan`` for their devices."""
    spec = book.spec
    moves: list[tuple[JobRecord, str]] = []
    for i, record in enumerate(records):
        target, where = int(assignment[i]), int(current[i])
        if pinned[i] or (record.state is JobState.RUNNING and target == where):
            continue
        if record.state is JobState.RUNNING and target < 0:
            sched.yield_round(record, spec.grace_s, _stop_reason(book, "runs no device"), now)
        elif record.state is JobState.RUNNING:
            moves.append((record, models[target]))
        elif target >= 0:
            book.plan[record.id] = models[target]
    for record, model in moves:
        if not _move(sched, book, record, model, now):
            reason = _stop_reason(book, f"moves to {model}, which is not free yet")
            sched.yield_round(record, spec.grace_s, reason, now)
            book.plan[record.id] = model


def _stop_reason(book: RoundPlan, what: str) -> str:
    return f"round policy {book.spec.policy}: in the round from t={book.last_at:g} it {what}"


def _place(
    sched: Books, book: RoundPlan, record: JobRecord, model: str, state: ClusterState, now: float
) -> list[tuple[int, Placement]] | None:
    """Placements on ``model`` for the job's tasks (those still to place of a waiting job,
    all of a running one), found on ``state`` (a fork: what is allocated there while
    searching is given back), or None."""
    job = record.job
    rows = model_rows(sched.state, book.spec.device_class, model)
    if not rows.any():
        return None
    ctx = CycleContext(state, job, job.resources, now, what_if=state is not sched.state)
    placed: list[tuple[int, Placement]] = []
    for task in record.unplaced if record.state is JobState.PENDING else sorted(record.placements):
        placement = sched.framework.select(ctx, candidates=rows)
        if placement is None or not all(
            state.device_of(d.device_id).model == model for d in placement.devices
        ):
            break
        state.allocate(f"{job.id}/round{task}", placement)
        placed.append((task, placement))
    for task, _ in placed:
        state.release(f"{job.id}/round{task}")
    expected = len(record.unplaced) if record.state is JobState.PENDING else len(record.placements)
    return placed if placed and len(placed) == expected else None


def _move(sched: Books, book: RoundPlan, record: JobRecord, model: str, now: float) -> bool:
    """Migrate a running job to ``model`` when its devices there are free now."""
    fork = sched.state.fork()
    try:
        placed = _place(sched, book, record, model, fork, now)
    except PluginError:
        return False
    if placed is None:
        return False
    try:
        sched.migrate(record, placed, MigrationKind.ROUND, None, book.spec.grace_s, now)
    except AllocationError:
        return False
    return True


def start_chosen(sched: Books, book: RoundPlan, now: float) -> None:
    """Start the round's choices whose devices are free (in arrival order)."""
    for job_id, model in list(book.plan.items()):
        record = sched.jobs.get(job_id)
        if record is None or record.state is not JobState.PENDING:
            del book.plan[job_id]
            continue
        if record.stopping or record.nominated or now < record.backoff_until:
            continue
        if _bind_on(sched, book, record, model, now):
            del book.plan[job_id]


def _bind_on(sched: Books, book: RoundPlan, record: JobRecord, model: str, now: float) -> bool:
    """Place and bind the job on ``model`` through the profile's Reserve, Permit and Bind
    points; False (nothing held) when it does not fit now or a plugin refuses."""
    job = record.job
    try:
        placed = _place(sched, book, record, model, sched.state.fork(), now)
    except PluginError:
        return False
    if placed is None:
        return False
    framework = sched.framework
    ctx = CycleContext(sched.state, job, job.resources, now)
    taken: list[tuple[int, Placement]] = []
    ok = True
    try:
        for task, placement in placed:
            key = TaskKey(job.id, task, record.run + 1)
            sched.allocate(key, placement, job)
            if not framework.reserve(ctx, placement).ok:
                sched.unallocate(key)
                ok = False
                break
            taken.append((task, placement))
        placements = [p for _, p in taken]
        ok = ok and framework.permit(ctx, placements).ok and framework.bind(ctx, placements).ok
    except (PluginError, AllocationError):
        ok = False
    if not ok:
        for task, placement in reversed(taken):
            framework.unreserve(ctx, placement)
            sched.unallocate(TaskKey(job.id, task, record.run + 1))
        return False
    sched.bind(record, taken, now)
    sched.started(record)
    return True
