"""The service's history for ``hetsched history export``: read from the store (it is the
source of truth, and it can be read while the service is down), written in the format of
:mod:`hetsched.model.history`.

What a replay needs and the store keeps: every job's submission and submit time, its tasks'
runs (node, devices, start, end, how each ended), its transitions (when a cancel took it),
and the nodes the service saw (``nodes``, kept since migration 0010), with the profile and
seed the service ran under (store marks written at each start, :func:`record_start`).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import select

from hetsched.controlplane.storage.health import where
from hetsched.controlplane.storage.store import Store
from hetsched.controlplane.storage.tables import jobs, tasks, transitions
from hetsched.framework.profile import ProfileSpec
from hetsched.model.device import Node
from hetsched.model.history import HistoryDocument, HistoryJob, HistoryNode, HistoryRun
from hetsched.model.specs import JobSpec

__all__ = ["PROFILE_MARK", "SEED_MARK", "export_history", "job_spec_fields", "record_start"]

#: the store marks that say which profile and seed the service last started with
PROFILE_MARK = "history.profile"
SEED_MARK = "history.seed"

#: a submission's fields that are the job spec's (names and aliases): what a replay reads
_SPEC_KEYS = frozenset(JobSpec.model_fields) | frozenset(
    f.alias for f in JobSpec.model_fields.values() if f.alias
)


def record_start(store: Store, present: Sequence[Node], profile: ProfileSpec, seed: int) -> None:
    """At a start of the service: its nodes, profile and seed, for the history."""
    now = time.time()
    store.record_nodes_at_start(present, now)
    document = profile.model_dump(mode="json", exclude_defaults=True)
    store.mark(PROFILE_MARK, json.dumps(document, sort_keys=True), now)
    store.mark(SEED_MARK, str(seed), now)


def job_spec_fields(submission: dict[str, Any]) -> dict[str, Any]:
    """The job-spec part of a stored submission: what runs (command, environment, working
    directory) and where it came from (a federation) are left out, of its groups too."""
    spec = {k: v for k, v in submission.items() if k in _SPEC_KEYS}
    if isinstance(spec.get("groups"), list):
        spec["groups"] = [
            {k: v for k, v in g.items() if k != "command"} if isinstance(g, dict) else g
            for g in spec["groups"]
        ]
    return spec


def _runs(rows: Sequence[Any], since: Callable[[float | None], float | None]) -> list[HistoryRun]:
    out = []
    for row in rows:
        placement = row.placement or {}
        held = placement.get("devices", ())
        out.append(
            HistoryRun(
                run=row.run,
                task=row.task,
                node=row.node,
                cpu_milli=int(placement.get("cpu_milli", 0)),
                devices=tuple(str(d["id"]) for d in held),
                shares=tuple(int(d.get("share", 1000)) for d in held),
                bound_s=since(row.bound_at) or 0.0,
                started_s=since(row.started_at if row.started_at is not None else row.bound_at),
                ended_s=since(row.ended_at),
                state=row.state,
                exit_code=row.exit_code,
                reason=row.reason or "",
            )
        )
    return out


def _read(
    store: Store,
) -> tuple[list[Any], dict[str, list[Any]], dict[str, tuple[float, str]]]:
    """Jobs in arrival order, their tasks by job (in the order they were placed), and when
    and why each cancelled job was cancelled."""
    with store.read() as conn:
        job_rows = conn.execute(select(jobs).order_by(jobs.c.seq)).all()
        task_rows = conn.execute(select(tasks).order_by(tasks.c.id)).all()
        cancels = conn.execute(
            select(transitions.c.job_id, transitions.c.time, transitions.c.cause)
            .where(transitions.c.target == "cancelled")
            .order_by(transitions.c.id)
        ).all()
    by_job: dict[str, list[Any]] = defaultdict(list)
    for row in task_rows:
        by_job[row.job_id].append(row)
    cancelled: dict[str, tuple[float, str]] = {}
    for job_id, at, cause in cancels:
        cancelled.setdefault(job_id, (at, cause))
    return list(job_rows), by_job, cancelled


def export_history(store: Store, source: str | None = None) -> HistoryDocument:
    """The store's history as a document (times since the first submission)."""
    job_rows, by_job, cancelled = _read(store)
    node_rows = store.node_history()
    starts = [r.submitted_at for r in job_rows] or [r["joined_at"] for r in node_rows]
    origin = min(starts, default=time.time())

    def since(at: float | None) -> float | None:
        return None if at is None else max(at - origin, 0.0)

    history_jobs = [
        HistoryJob(
            id=row.id,
            user=row.owner,
            spec=job_spec_fields(row.spec),
            submit_s=since(row.submitted_at) or 0.0,
            element=row.array_index if row.array_of is not None else None,
            state=row.state,
            reason=row.reason or "",
            exit_code=row.exit_code,
            first_started_s=since(row.first_started_at),
            ended_s=since(row.ended_at),
            preemptions=row.preemptions,
            restarts=row.restarts,
            cancelled_s=since(cancelled[row.id][0]) if row.id in cancelled else None,
            cancel_cause=cancelled[row.id][1] if row.id in cancelled else "",
            runs=tuple(_runs(by_job.get(row.id, ()), since)),
        )
        for row in job_rows
    ]
    history_nodes = [
        HistoryNode(
            entry=row["entry"],
            device_ids=tuple(row["device_ids"]),
            joined_s=since(row["joined_at"]) or 0.0,
            left_s=since(row["left_at"]),
        )
        for row in node_rows
    ]
    marks = store.marks()
    profile = marks.get(PROFILE_MARK)
    return HistoryDocument(
        source=source or f"hetsched up ({where(store.engine.url)})",
        origin=origin,
        taken_s=since(time.time()) or 0.0,
        profile=None if profile is None else json.loads(profile),
        seed=int(marks.get(SEED_MARK, "0")),
        nodes=tuple(history_nodes),
        jobs=tuple(history_jobs),
    )
