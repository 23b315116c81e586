"""The persistent store: the service's source of truth.

SQLite (a file, WAL mode) by default, PostgreSQL when given a ``postgresql+psycopg://`` URL.
The scheduling core is only a cache rebuilt from here on start.

Contract: every method that changes something commits before it returns, so a caller that
answers 2xx after it returns never acknowledges a change that a crash could lose. On SQLite
writers are serialized by one in-process lock (one process owns the file), which avoids
SQLite's busy-retry sleeps under concurrent submissions.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from alembic import command
from sqlalchemy import Connection, Engine, create_engine, event, func, select, update

from hetsched.controlplane.storage.groupcommit import GroupCommit, insert_submitted
from hetsched.controlplane.storage.health import StoreHealth, where
from hetsched.controlplane.storage.marks import StoreMarks, migration_config
from hetsched.controlplane.storage.nodestore import NodeRecords
from hetsched.controlplane.storage.speedstore import SpeedRecords
from hetsched.controlplane.storage.tables import (
    allocations,
    job_counts,
    jobs,
    tasks,
    tokens,
    transitions,
)
from hetsched.controlplane.storage.turnstore import TurnRecords
from hetsched.controlplane.storage.walmode import (
    Checkpointer,
    restore_synchronous,
    set_synchronous,
    sqlite_pragmas,
)
from hetsched.controlplane.storage.workflowstore import WorkflowRecords

__all__ = ["Conflict", "NewJob", "Principal", "Store", "digest", "new_token"]

#: states a job never leaves
TERMINAL_STATES = ("succeeded", "failed", "cancelled", "rejected")
#: states of a task that has ended (it holds nothing)
TASK_ENDED = ("exited", "stopped", "lost")


class Conflict(Exception):
    """An idempotency key reused with a different body."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from."""

    token_id: str
    user: str
    admin: bool


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "hs_" + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job of a batch as the API admitted it."""

    id: str
    owner: str
    queue: str
    name: str
    priority: int
    #: the submission as accepted (its JSON document)
    spec: dict[str, Any]


def _batch_keys(request_key: str | None, count: int) -> list[str | None]:
    if request_key is None:
        return [None] * count
    stem = hashlib.sha256(request_key.encode()).hexdigest()[:32]
    return [f"batch:{stem}:{index}" for index in range(count)]


def _pending_row(
    item: NewJob, key: str | None, body_digest: str | None, now: float
) -> dict[str, Any]:
    return {
        "id": item.id,
        "owner": item.owner,
        "queue": item.queue,
        "name": item.name,
        "priority": item.priority,
        "spec": item.spec,
        "request_key": key,
        "body_digest": body_digest,
        "state": "pending",
        "reason": "submitted",
        "explanation": None,
        "run": 0,
        "restarts": 0,
        "preemptions": 0,
        "cancel_requested": False,
        "submitted_at": now,
        "started_at": None,
        "first_started_at": None,
        "ended_at": None,
        "exit_code": None,
    }


class Store(TurnRecords, SpeedRecords, WorkflowRecords, StoreMarks, NodeRecords):
    """Typed access to the tables. Thread-safe; every write commits before returning."""

    def __init__(self, url: str, sync: str = "FULL") -> None:
        self.url = url
        self.sqlite = url.startswith("sqlite")
        kwargs: dict[str, Any] = {}
        if self.sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        else:
            kwargs["pool_size"] = 10
            kwargs["max_overflow"] = 20
            # a server that restarted or failed over: a dead pooled connection is replaced
            # before use, and an unreachable one is given up on, not waited for
            kwargs["pool_pre_ping"] = True
            kwargs["connect_args"] = {"connect_timeout": 5}
        self.engine: Engine = create_engine(url, **kwargs)
        if self.sqlite:
            event.listen(self.engine, "connect", sqlite_pragmas(sync.upper()))
        self._write_lock = threading.Lock() if self.sqlite else None
        #: the SQLite ``synchronous`` of every connection; a write that need not survive a
        #: power loss lowers it to NORMAL for its own commit (:meth:`write`)
        self._sync = sync.upper() if self.sqlite else None
        #: WAL checkpoints, off the commit path (controlplane/storage/walmode.py)
        self.checkpointer = Checkpointer(self.engine) if self.sqlite else None
        #: the writer thread that commits single submissions in groups (groupcommit.py)
        self._group = GroupCommit(self.write)
        #: run first in every write transaction; raises to refuse it (a standby pair's
        #: leader checks its lease's epoch: controlplane/leadership.py)
        self.fence: Callable[[Connection], None] | None = None
        #: whether the store can be written now (controlplane/storage/health.py)
        self.health = StoreHealth(where(self.engine.url))
        #: called once the store is closed (the home's marker: a clean stop)
        self.on_close: list[Callable[[], None]] = []

    def close(self) -> None:
        self._group.close()
        if self.checkpointer is not None:
            self.checkpointer.close()
        self.engine.dispose()
        for closed in self.on_close:
            closed()

    # -- schema --------------------------------------------------------------------------

    def migrate(self) -> None:
        """Bring the schema to the newest alembic revision (idempotent)."""
        config = migration_config()
        with self.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "head")

    # -- transactions --------------------------------------------------------------------

    @contextmanager
    def write(self, durable: bool = True) -> Iterator[Connection]:
        """One write transaction, committed when the block ends without an exception.

        ``durable=False`` is for a write that is worthless after a power loss: on SQLite
        with ``synchronous=FULL`` it commits without waiting for the disk (NORMAL: the WAL
        is written, not flushed), so it survives the service's own crash, and a power loss
        loses at most the last such writes, never one before a durable commit (the WAL is
        replayed in order up to the last intact commit). Elsewhere it is an ordinary write.
        """
        if self._write_lock is None:
            with self.engine.begin() as conn:
                if self.fence is not None:
                    self.fence(conn)
                yield conn
            return
        relaxed = not durable and self._sync == "FULL"
        with self._write_lock, self.engine.connect() as conn:
            if relaxed:
                set_synchronous(conn, "NORMAL")
            try:
                with conn.begin():
                    if self.fence is not None:
                        self.fence(conn)
                    yield conn
            finally:
                if relaxed:
                    restore_synchronous(conn, "FULL")
        if self.checkpointer is not None:
            self.checkpointer.wrote()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            yield conn

    # -- tokens --------------------------------------------------------------------------

    def create_token(self, user: str, admin: bool = False) -> tuple[str, str]:
        """A new token for ``user``; returns (token id, token). Only the digest is stored."""
        token = new_token()
        return self.adopt_token(token, user, admin), token

    def adopt_token(self, token: str, user: str, admin: bool = False) -> str:
        """Store ``token`` (one this home issued before) for ``user``; returns its id."""
        token_id = "t" + secrets.token_hex(6)
        row = {"id": token_id, "owner": user, "digest": digest(token), "admin": admin}
        with self.write() as conn:
            conn.execute(tokens.insert().values(**row, created_at=time.time()))
        return token_id

    def has_admin_token(self) -> bool:
        with self.read() as conn:
            row = conn.execute(
                select(tokens.c.id).where(tokens.c.admin, tokens.c.revoked_at.is_(None)).limit(1)
            ).first()
        return row is not None

    def principal(self, token: str) -> Principal | None:
        with self.read() as conn:
            row = conn.execute(
                select(tokens.c.id, tokens.c.owner, tokens.c.admin).where(
                    tokens.c.digest == digest(token), tokens.c.revoked_at.is_(None)
                )
            ).first()
        return None if row is None else Principal(row.id, row.owner, bool(row.admin))

    def revoke_token(self, token_id: str) -> bool:
        with self.write() as conn:
            result = conn.execute(
                update(tokens)
                .where(tokens.c.id == token_id, tokens.c.revoked_at.is_(None))
                .values(revoked_at=time.time())
            )
        return result.rowcount > 0

    def list_tokens(self) -> list[dict[str, Any]]:
        with self.read() as conn:
            rows = conn.execute(
                select(
                    tokens.c.id,
                    tokens.c.owner,
                    tokens.c.admin,
                    tokens.c.created_at,
                    tokens.c.revoked_at,
                ).order_by(tokens.c.created_at)
            ).all()
        return [dict(r._mapping) for r in rows]

    # -- jobs ----------------------------------------------------------------------------

    def insert_job(
        self,
        job_id: str,
        owner: str,
        queue: str,
        name: str,
        priority: int,
        spec: dict[str, Any],
        request_key: str | None,
        body_digest: str | None,
        submitted_at: float | None = None,
        on_commit: Callable[[dict[str, Any]], None] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Store a submitted job as pending; returns (row, created) once it is committed.
        ``submitted_at`` is when it was admitted (default: now). ``on_commit`` gets the row
        of a new job (not a replay) from the writer thread as soon as it is committed, before
        the caller is woken: the reconcile loop hears of the job one thread hand-over
        sooner (it must not block: it holds up the group's other callers).

        With a ``request_key`` already used by ``owner`` the stored job comes back with
        created False (a retried submit), or Conflict if the body differs.

        Submissions are committed in groups by one writer thread: every caller still returns
        only after the transaction holding its job has committed, but concurrent callers
        share one commit (one fsync) instead of queueing for one each.
        """
        now = time.time() if submitted_at is None else submitted_at
        item = NewJob(job_id, owner, queue, name, priority, spec)
        row = _pending_row(item, request_key, body_digest, now)
        stored, created = self._group.submit(row, on_commit)
        if not created:
            return self._replay(stored, body_digest), False
        return stored, True

    def insert_jobs(
        self,
        items: Sequence[NewJob],
        request_key: str | None,
        body_digest: str | None,
        submitted_at: float | None = None,
    ) -> tuple[list[dict[str, Any]], bool]:
        """Store a batch of submitted jobs as pending, all in one transaction: every job is
        committed or none is. Returns (rows in order, created) once committed.
        ``submitted_at`` is when they were admitted (default: now).

        With a ``request_key`` already used for a batch (by the same caller: the same jobs'
        owners), the batch it created comes back with created False, or Conflict if the body
        differs. Each job's own key
        is derived from the batch's (``batch:<digest of the key>:<index>``), so a single
        submission's key never replays a batch.
        """
        now = time.time() if submitted_at is None else submitted_at
        keys = _batch_keys(request_key, len(items))
        rows = [
            _pending_row(item, key, body_digest, now) for item, key in zip(items, keys, strict=True)
        ]
        with self.write() as conn:
            if keys[0] is not None:
                wanted = {(item.owner, key) for item, key in zip(items, keys, strict=True)}
                found = [
                    dict(r._mapping)
                    for r in conn.execute(select(jobs).where(jobs.c.request_key.in_(keys))).all()
                    if (r.owner, r.request_key) in wanted
                ]
                if found:
                    by_key = {(r["owner"], r["request_key"]): r for r in found}
                    earlier = [
                        by_key[(item.owner, k)]
                        for item, k in zip(items, keys, strict=True)
                        if (item.owner, k) in by_key
                    ]
                    if len(earlier) != len(keys) or any(
                        r["body_digest"] != body_digest for r in earlier
                    ):
                        raise Conflict(
                            "idempotency key already used for a batch with a different body"
                        )
                    return earlier, False
            insert_submitted(conn, rows)
        return rows, True

    def _replay(self, row: dict[str, Any], body_digest: str | None) -> dict[str, Any]:
        if row["body_digest"] != body_digest:
            raise Conflict(
                f"idempotency key already used for job {row['id']} with a different body"
            )
        return row

    def _by_request_key(self, owner: str, key: str) -> dict[str, Any] | None:
        with self.read() as conn:
            row = conn.execute(
                select(jobs).where(jobs.c.owner == owner, jobs.c.request_key == key)
            ).first()
        return None if row is None else dict(row._mapping)

    def job(self, job_id: str) -> dict[str, Any] | None:
        with self.read() as conn:
            row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
        return None if row is None else dict(row._mapping)

    def list_jobs(
        self,
        owner: str | None = None,
        queue: str | None = None,
        include_terminal: bool = False,
        limit: int = 1000,
        *,
        states: Sequence[str] = (),
        after: int | None = None,
        newest: bool = False,
    ) -> list[dict[str, Any]]:
        """At most ``limit`` jobs in arrival order (``newest``: the latest first). A page
        starts past the job with arrival number ``after`` (its ``seq``; the ``seq`` of a
        page's last row is the next page's ``after``), so paging costs an index range
        read whatever the number of jobs. ``states`` keeps only jobs in those states
        (terminal ones included when named)."""
        order = jobs.c.seq.desc() if newest else jobs.c.seq
        query = select(jobs).order_by(order).limit(limit)
        if owner is not None:
            query = query.where(jobs.c.owner == owner)
        if queue is not None:
            query = query.where(jobs.c.queue == queue)
        if states:
            query = query.where(jobs.c.state.in_(list(states)))
        elif not include_terminal:
            query = query.where(jobs.c.state.not_in(TERMINAL_STATES))
        if after is not None:
            query = query.where(jobs.c.seq < after if newest else jobs.c.seq > after)
        with self.read() as conn:
            return [dict(r._mapping) for r in conn.execute(query).all()]

    def live_jobs(self) -> list[dict[str, Any]]:
        """Jobs not in a terminal state, in arrival order: what a restart replays."""
        return self.list_jobs(include_terminal=False, limit=10**9)

    def request_cancel(self, job_id: str) -> bool:
        """Record a cancel request; False if the job is already terminal."""
        with self.write() as conn:
            result = conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.state.not_in(TERMINAL_STATES))
                .values(cancel_requested=True)
            )
        return result.rowcount > 0

    def jobs_by_ids(self, job_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The jobs among ``job_ids`` that exist (any order)."""
        if not job_ids:
            return []
        with self.read() as conn:
            rows = conn.execute(select(jobs).where(jobs.c.id.in_(list(job_ids)))).all()
        return [dict(r._mapping) for r in rows]

    def job_transitions(self, job_id: str) -> list[dict[str, Any]]:
        with self.read() as conn:
            rows = conn.execute(
                select(transitions).where(transitions.c.job_id == job_id).order_by(transitions.c.id)
            ).all()
        return [dict(r._mapping) for r in rows]

    def job_tasks(self, job_id: str) -> list[dict[str, Any]]:
        with self.read() as conn:
            rows = conn.execute(
                select(tasks).where(tasks.c.job_id == job_id).order_by(tasks.c.run, tasks.c.task)
            ).all()
        return [dict(r._mapping) for r in rows]

    def tasks_in(self, states: Sequence[str]) -> list[dict[str, Any]]:
        with self.read() as conn:
            rows = conn.execute(select(tasks).where(tasks.c.state.in_(states))).all()
        return [dict(r._mapping) for r in rows]

    def unfinished_tasks(self) -> list[dict[str, Any]]:
        """Every task not recorded as ended (``starting``, ``running``, ``stopping``, or a
        state this code does not know): what recovery must reconcile."""
        with self.read() as conn:
            rows = conn.execute(
                select(tasks).where(tasks.c.state.not_in(TASK_ENDED)).order_by(tasks.c.id)
            ).all()
        return [dict(r._mapping) for r in rows]

    def queue_times(self, job_id: str | None = None) -> dict[str, float]:
        """Pending job id -> when it last entered the queue (its submission, or its last
        requeue): the queue time a restart keeps. Every pending job's, or ``job_id``'s
        alone (an index read, whatever the backlog)."""
        query = (
            select(transitions.c.job_id, func.max(transitions.c.time))
            .join(jobs, jobs.c.id == transitions.c.job_id)
            .where(jobs.c.state == "pending", transitions.c.target == "pending")
            .group_by(transitions.c.job_id)
        )
        if job_id is not None:
            query = query.where(transitions.c.job_id == job_id)
        with self.read() as conn:
            return {job_id: float(at) for job_id, at in conn.execute(query).all()}

    def live_allocations(self) -> list[dict[str, Any]]:
        """The allocation rows still held."""
        with self.read() as conn:
            rows = conn.execute(
                select(allocations).where(allocations.c.live.is_(True)).order_by(allocations.c.id)
            ).all()
        return [dict(r._mapping) for r in rows]

    def queue_usage(self) -> list[dict[str, Any]]:
        """Per queue: jobs by state (states with none left out). Read from the counts the
        store's triggers keep (``job_counts``), one row per queue and state: it costs the
        same with a million jobs as with ten."""
        query = (
            select(job_counts.c.queue, job_counts.c.state, job_counts.c.n)
            .where(job_counts.c.n > 0)
            .order_by(job_counts.c.queue, job_counts.c.state)
        )
        with self.read() as conn:
            rows = conn.execute(query).all()
        return [{"queue": q, "state": s, "count": int(n)} for q, s, n in rows]

    def running_specs(self) -> list[dict[str, Any]]:
        """Placements of live tasks with their job's queue: what queues use now."""
        with self.read() as conn:
            rows = conn.execute(
                select(jobs.c.queue, tasks.c.placement)
                .join(tasks, tasks.c.job_id == jobs.c.id)
                .where(tasks.c.state.in_(("starting", "running", "stopping")))
            ).all()
        return [{"queue": q, "placement": p} for q, p in rows]

    def allocation_history(self) -> list[dict[str, Any]]:
        with self.read() as conn:
            rows = conn.execute(select(allocations).order_by(allocations.c.id)).all()
        return [dict(r._mapping) for r in rows]
