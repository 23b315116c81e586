"""Admitting submissions: one job (``POST /v1/jobs``) or a batch (``POST /v1/jobs/batch``).

Every check runs before anything is stored: the strict schema, who may submit for whom and
to which queue, the queue's hard quota, and whether any node could ever hold a task. A batch
is all or nothing: each job is checked, every problem is reported with the job's index
(``jobs[3].resources.cpu: ...``), and the jobs are stored in one transaction only when none
has a problem. These functions block (validation, the store): the routes run them in a
worker thread, never on the event loop.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException
from pydantic import ValidationError

from hetsched.controlplane.schemas import (
    InvalidBody,
    SubmitSpec,
    Unsatisfiable,
    error_lines,
    parse_batch,
    parse_submission,
)
from hetsched.controlplane.storage.store import Conflict, NewJob, Principal
from hetsched.controlplane.workflows import Unresolved, resolve_after
from hetsched.model.job import Job
from hetsched.model.job_spec import AfterSpec

if TYPE_CHECKING:
    from hetsched.controlplane.context import Service

__all__ = ["canonical_digest", "submit_batch", "submit_one"]


class _Refused(Exception):
    """One job refused: the status it answers alone, and the message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class _Admission:
    """A submission that passed every check, with what storing it needs."""

    owner: str
    job: Job
    spec: SubmitSpec


class _Feasible:
    """Feasibility answers for one request: jobs of a batch often ask for the same thing."""

    def __init__(self, service: Service) -> None:
        self._service = service
        self._answers: dict[tuple[str, int], str | None] = {}

    def problem(self, job: Job) -> str | None:
        key = (repr(job.resources), job.gang_min)
        if key not in self._answers:
            try:
                self._service.feasibility.check(job)
                self._answers[key] = None
            except Unsatisfiable as exc:
                self._answers[key] = str(exc)
        return self._answers[key]


def _admit(
    service: Service, spec: SubmitSpec, who: Principal, feasible: _Feasible, now: float
) -> _Admission:
    """The checks one job must pass; raises _Refused with the status it answers."""
    owner = who.user
    if "user" in spec.model_fields_set and spec.user != who.user:
        if not who.admin:
            raise _Refused(403, "only an admin may submit for another user")
        owner = spec.user
    queue = service.queues.by_name().get(spec.queue)
    if queue is None:
        raise _Refused(404, f"no queue {spec.queue!r}")
    if not queue.admits(owner):
        raise _Refused(403, f"user {owner} may not submit to queue {spec.queue}")
    if service.mapped_users is not None and owner not in service.mapped_users:
        raise _Refused(403, f"user {owner} has no OS account to run jobs as")
    if spec.federation is not None:
        fencing = service.fencing
        if fencing is None or not fencing.live(spec.federation):
            raise _Refused(
                409,
                f"federation {spec.federation} holds no live lease here: renew it "
                "(POST /v1/federation/lease) before sending its jobs",
            )
    job = spec.to_job("j" + secrets.token_hex(8), owner, now)
    problem = queue.over_quota(job)
    if problem is not None:
        raise _Refused(403, problem)
    unsatisfiable = feasible.problem(job)
    if unsatisfiable is not None:
        raise _Refused(422, f"resources: {unsatisfiable}")
    return _Admission(owner, job, spec)


def submit_one(
    service: Service, body: bytes, who: Principal, key: str | None
) -> tuple[dict[str, Any], bool]:
    """Admit and store one job; returns (row, created). Raises HTTPException."""
    try:
        spec = parse_submission(body)
    except InvalidBody as exc:
        raise HTTPException(400, str(exc)) from None
    except ValidationError as exc:
        raise HTTPException(422, {"message": "invalid job", "errors": error_lines(exc)}) from None
    try:
        admitted = _admit(service, spec, who, _Feasible(service), time.time())
    except _Refused as exc:
        if exc.status == 422:
            raise HTTPException(422, {"message": "invalid job", "errors": [exc.message]}) from None
        raise HTTPException(exc.status, exc.message) from None
    stored = json.loads(body)
    body_digest = canonical_digest(stored) if key else None
    _resolve(service, who, [admitted], [stored])
    job = admitted.job
    try:
        row, created = service.store.insert_job(
            job.id,
            admitted.owner,
            spec.queue,
            spec.name,
            spec.priority,
            stored,
            key,
            body_digest,
            job.submit_time,
            # the writer hands the job to the loop as it commits, one thread hop sooner
            on_commit=lambda committed: service.loop.submitted(committed, admitted.spec, job),
        )
    except Conflict as exc:
        raise HTTPException(409, str(exc)) from None
    return row, created


def submit_batch(
    service: Service, body: bytes, who: Principal, key: str | None
) -> tuple[list[dict[str, Any]], bool]:
    """Admit every job of a batch and store them together, or none; returns (rows in the
    batch's order, created). Raises HTTPException listing every refused job by index."""
    try:
        batch = parse_batch(body)
    except InvalidBody as exc:
        raise HTTPException(400, str(exc)) from None
    except ValidationError as exc:
        raise HTTPException(
            422, {"message": "invalid batch: nothing was stored", "errors": error_lines(exc)}
        ) from None
    feasible, now = _Feasible(service), time.time()
    admitted: list[_Admission] = []
    refused: list[tuple[int, _Refused]] = []
    for index, spec in enumerate(batch.jobs):
        try:
            admitted.append(_admit(service, spec, who, feasible, now))
        except _Refused as exc:
            refused.append((index, exc))
    if refused:
        raise HTTPException(
            refused[0][1].status,
            {
                "message": f"{len(refused)} of {len(batch.jobs)} jobs refused: nothing was stored",
                "errors": [f"jobs[{i}]: {exc.message}" for i, exc in refused],
            },
        )
    documents = json.loads(body)["jobs"]
    body_digest = canonical_digest(documents) if key else None
    _resolve(service, who, admitted, documents)
    items = [
        NewJob(a.job.id, a.owner, a.spec.queue, a.spec.name, a.spec.priority, document)
        for a, document in zip(admitted, documents, strict=True)
    ]
    try:
        rows, created = service.store.insert_jobs(items, key, body_digest, now)
    except Conflict as exc:
        raise HTTPException(409, str(exc)) from None
    if created:
        for row, admission in zip(rows, admitted, strict=True):
            service.loop.submitted(row, admission.spec, admission.job)
    return rows, created


def _resolve(
    service: Service, who: Principal, admitted: list[_Admission], documents: list[Any]
) -> None:
    """Resolve each job's ``after`` to job ids, in its job, its spec and the document
    stored (422 naming each entry that names no job or can never be met). The digest of an
    idempotency key is taken before: a retry of the same body replays."""
    if not any(a.spec.after for a in admitted):
        return
    try:
        resolved = resolve_after(
            service.store,
            [a.owner for a in admitted],
            who.admin,
            [a.spec for a in admitted],
            [a.job.id for a in admitted],
        )
    except Unresolved as exc:
        message = "invalid job" if len(admitted) == 1 else "invalid batch: nothing was stored"
        raise HTTPException(422, {"message": message, "errors": exc.errors}) from None
    for admission, document, after in zip(admitted, documents, resolved, strict=True):
        if not after:
            continue
        document["after"] = after
        admission.spec = admission.spec.model_copy(
            update={"after": [AfterSpec(job=a["job"], state=a["state"]) for a in after]}
        )
        admission.job = dataclasses.replace(admission.job, after=admission.spec.dependencies())


def canonical_digest(document: Any) -> str:
    """The digest an idempotency key is bound to: of the request's JSON, not its bytes, so a
    retry that re-serializes the same document (whitespace, key order, escapes) replays."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()
