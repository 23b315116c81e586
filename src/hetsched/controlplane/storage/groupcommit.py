"""Group commit of single submissions: one writer thread commits the jobs that concurrent
callers submit, as many as are waiting (up to 512) in one transaction. Part of
:class:`~hetsched.controlplane.storage.store.Store` (which owns every SQL
statement of the control plane), kept
here so each module stays one concern.

Contract: :meth:`GroupCommit.submit` returns only after the transaction holding its job has
committed, so a caller that answers 2xx never acknowledges a job that a crash could lose;
concurrent callers share one commit (one fsync) instead of queueing for one each. One bad
row never fails the others of its group: the group is retried one row per transaction.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select

from hetsched.controlplane.storage.health import unavailable
from hetsched.controlplane.storage.tables import jobs, transitions

__all__ = ["GroupCommit", "insert_submitted"]

log = logging.getLogger(__name__)

#: the most submissions one transaction holds
_MAX_GROUP = 512


@dataclass(slots=True)
class _Submission:
    """One submission waiting for the group commit that will hold it."""

    row: dict[str, Any]
    #: called by the writer with the row once committed, if the row is new
    on_commit: Callable[[dict[str, Any]], None] | None = None
    done: threading.Event = field(default_factory=threading.Event)
    result: tuple[dict[str, Any], bool] | None = None
    error: BaseException | None = None


def _committed(item: _Submission) -> None:
    """Hand a committed submission on: to ``on_commit`` if it created a job, then its caller."""
    try:
        created = item.error is None and item.result is not None and item.result[1]
        if item.on_commit is not None and item.result is not None and created:
            item.on_commit(item.result[0])
    except Exception:
        log.exception("handing a committed job on failed")
    finally:
        item.done.set()


class GroupCommit:
    """The writer thread of single submissions (started on the first one)."""

    def __init__(self, write: Callable[[], AbstractContextManager[Connection]]) -> None:
        #: one durable write transaction (Store.write)
        self._write = write
        self._submissions: queue.SimpleQueue[_Submission | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()

    def close(self) -> None:
        """Stop the writer once the submissions queued before this call are committed."""
        if self._writer is not None:
            self._submissions.put(None)
            self._writer.join(timeout=10)

    def submit(
        self, row: dict[str, Any], on_commit: Callable[[dict[str, Any]], None] | None = None
    ) -> tuple[dict[str, Any], bool]:
        """Store ``row`` (a pending job) and return (stored row, created) once committed: with
        a ``request_key`` already used by its owner, the stored job and False (the caller
        checks the body). ``on_commit`` gets a new job's row from the writer thread before the
        caller is woken (it must not block: it holds up the group's other callers)."""
        item = _Submission(row, on_commit)
        self._ensure_writer()
        self._submissions.put(item)
        item.done.wait()
        if item.error is not None:
            raise item.error
        assert item.result is not None
        return item.result

    def _ensure_writer(self) -> None:
        with self._writer_lock:
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(
                    target=self._write_submissions, name="hetsched-store-writer", daemon=True
                )
                self._writer.start()

    def _write_submissions(self) -> None:
        while True:
            first = self._submissions.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < _MAX_GROUP:
                try:
                    item = self._submissions.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._submissions.put(None)
                    break
                batch.append(item)
            self._commit_submissions(batch)

    def _commit_submissions(self, batch: list[_Submission]) -> None:
        try:
            with self._write() as conn:
                results = _insert_submissions(conn, batch)
        except Exception as exc:
            if unavailable(exc) is not None:
                # the store cannot be written: every submission of the group is refused
                # (the caller answers 503), none is handed on
                for item in batch:
                    item.error = exc
                    _committed(item)
                return
            # one bad row must not fail the others: retry each in its own transaction
            for item in batch:
                try:
                    with self._write() as conn:
                        result = _insert_submissions(conn, [item])[0]
                    # only once committed: a row whose commit failed never reaches the loop
                    item.result = result
                except Exception as error:
                    item.error = error
                _committed(item)
            return
        for item, result in zip(batch, results, strict=True):
            item.result = result
            _committed(item)


def _insert_submissions(
    conn: Connection, batch: list[_Submission]
) -> list[tuple[dict[str, Any], bool]]:
    results: list[tuple[dict[str, Any], bool]] = []
    new_rows: list[dict[str, Any]] = []
    # checked again inside the transaction (a retry may have won meanwhile), with one
    # query per owner for the whole group
    keyed = _stored_by_key(conn, [i.row for i in batch if i.row["request_key"] is not None])
    for item in batch:
        row = item.row
        key = row["request_key"]
        if key is not None:
            earlier = keyed.get((row["owner"], key))
            if earlier is not None:
                results.append((earlier, False))
                continue
            keyed[(row["owner"], key)] = row
        new_rows.append(row)
        results.append((row, True))
    if new_rows:
        insert_submitted(conn, new_rows)
    return results


def _stored_by_key(
    conn: Connection, rows: list[dict[str, Any]]
) -> dict[tuple[str, str], dict[str, Any]]:
    """(owner, request key) -> the stored job row, for the keys ``rows`` carry."""
    wanted: dict[str, set[str]] = {}
    for row in rows:
        wanted.setdefault(row["owner"], set()).add(row["request_key"])
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for owner, keys in wanted.items():
        query = select(jobs).where(jobs.c.owner == owner, jobs.c.request_key.in_(sorted(keys)))
        for match in conn.execute(query):
            found[(owner, match.request_key)] = dict(match._mapping)
    return found


def insert_submitted(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert new jobs' rows with the transition that says each was submitted pending."""
    conn.execute(jobs.insert(), rows)
    conn.execute(
        transitions.insert(),
        [
            {
                "job_id": r["id"],
                "time": r["submitted_at"],
                "source": None,
                "target": "pending",
                "cause": "submitted",
            }
            for r in rows
        ],
    )
