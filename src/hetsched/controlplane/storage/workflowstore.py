"""What dependencies and arrays read and write in the store. Part of
:class:`~hetsched.controlplane.storage.store.Store` (which provides ``read``).

An array is one row; an element gets its row when the core creates it (its submission
transition in a turn's plan): a copy of the array's row with its own id, name, index and
submission time (:func:`record_elements`, in the turn's transaction, before its tasks).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection, Float, Integer, String, bindparam, func, literal, select, update

from hetsched.controlplane.storage.tables import jobs, transitions
from hetsched.model.workflow import split_element
from hetsched.scheduler import Change, JobTransition

__all__ = ["WorkflowRecords", "record_elements"]


class WorkflowRecords:
    """Reads for dependencies and arrays (a part of Store, which provides ``read``)."""

    def read(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError  # provided by Store

    def write(self, durable: bool = True) -> AbstractContextManager[Connection]:
        raise NotImplementedError  # provided by Store

    def request_element_cancel(self, array_id: str, index: int, now: float) -> bool:
        """Record a cancel request for element ``index`` of a live array, creating its row
        if the core has not yet (so that a restart before the next turn still cancels it);
        False if the element has ended."""
        element = f"{array_id}[{index}]"
        with self.write() as conn:
            conn.execute(
                _ELEMENT,
                {"e_id": element, "e_suffix": f"[{index}]", "e_at": now, "e_index": index,
                 "e_array": array_id},
            )  # fmt: skip
            result = conn.execute(
                update(jobs)
                .where(jobs.c.id == element, jobs.c.state.not_in(list(_ENDED)))
                .values(cancel_requested=True)
            )
        return result.rowcount > 0

    def latest_named(self, owner: str, name: str) -> dict[str, Any] | None:
        """The owner's most recent job (not an element) called ``name``."""
        query = (
            select(jobs)
            .where(jobs.c.owner == owner, jobs.c.name == name, jobs.c.array_of.is_(None))
            .order_by(jobs.c.seq.desc())
            .limit(1)
        )
        with self.read() as conn:
            row = conn.execute(query).first()
        return None if row is None else dict(row._mapping)

    def element_states(self, array_id: str) -> dict[int, str]:
        """The array's created elements: index -> state."""
        query = select(jobs.c.array_index, jobs.c.state).where(jobs.c.array_of == array_id)
        with self.read() as conn:
            return {int(r.array_index): str(r.state) for r in conn.execute(query)}

    def element_counts(self, array_id: str) -> dict[str, int]:
        """The array's created elements counted by state."""
        query = (
            select(jobs.c.state, func.count())
            .where(jobs.c.array_of == array_id)
            .group_by(jobs.c.state)
        )
        with self.read() as conn:
            return {str(state): int(n) for state, n in conn.execute(query)}

    def unsuccessful_elements(self, array_id: str, limit: int = 1000) -> list[int]:
        """Indexes of the array's elements that ended other than succeeded, ascending."""
        query = (
            select(jobs.c.array_index)
            .where(
                jobs.c.array_of == array_id,
                jobs.c.state.in_(["failed", "cancelled", "rejected"]),
            )
            .order_by(jobs.c.array_index)
            .limit(limit)
        )
        with self.read() as conn:
            return [int(r.array_index) for r in conn.execute(query)]

    def job_states(self, job_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """(state, name) of each of ``job_ids`` that has a row."""
        if not job_ids:
            return {}
        query = select(jobs.c.id, jobs.c.state, jobs.c.name).where(jobs.c.id.in_(list(job_ids)))
        with self.read() as conn:
            return {str(r.id): (str(r.state), str(r.name)) for r in conn.execute(query)}


_existing = jobs.alias("existing")
_ENDED = ("succeeded", "failed", "cancelled", "rejected")

#: an element's row: its array's, with its own id, name, index and submission time
_ELEMENT = jobs.insert().from_select(
    [
        "id", "owner", "queue", "name", "priority", "spec", "state", "reason", "run",
        "restarts", "preemptions", "cancel_requested", "submitted_at", "lost_work_s",
        "migrations", "array_of", "array_index",
    ],
    select(
        bindparam("e_id", type_=String), jobs.c.owner, jobs.c.queue,
        jobs.c.name + bindparam("e_suffix", type_=String), jobs.c.priority, jobs.c.spec,
        literal("pending"), literal("submitted"), literal(0), literal(0), literal(0),
        literal(False), bindparam("e_at", type_=Float), literal(0.0), literal(0), jobs.c.id,
        bindparam("e_index", type_=Integer),
    ).where(
        jobs.c.id == bindparam("e_array"),
        # an element submitted again (by recovery) has its row already
        ~select(_existing.c.id).where(_existing.c.id == bindparam("e_id", type_=String)).exists(),
    ),
)  # fmt: skip


def record_elements(conn: Connection, changes: Sequence[JobTransition]) -> None:
    """Rows for the elements the core created this turn (their submissions), with the
    transition that says each was submitted."""
    params: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    for change in changes:
        if change.change is not Change.SUBMITTED:
            continue
        split = split_element(change.job_id)
        if split is None:
            continue
        array_id, index = split
        params.append(
            {
                "e_id": change.job_id,
                "e_suffix": f"[{index}]",
                "e_at": change.time,
                "e_index": index,
                "e_array": array_id,
            }
        )
        history.append(
            {
                "job_id": change.job_id,
                "time": change.time,
                "source": None,
                "target": "pending",
                "cause": "created: its array may run it",
            }
        )
    if not params:
        return
    # an element submitted again (by recovery) has its row and its history already
    ids = [p["e_id"] for p in params]
    known = {r.id for r in conn.execute(select(jobs.c.id).where(jobs.c.id.in_(ids)))}
    fresh = [p for p in params if p["e_id"] not in known]
    if fresh:
        conn.execute(_ELEMENT, fresh)
        conn.execute(transitions.insert(), [h for h in history if h["job_id"] not in known])
