"""``POST /v1/jobs/cancel``: cancel many jobs in one request, all in one transaction.

The jobs are named (``ids``: ids, unique names or unique id prefixes, as every job route
takes them) or chosen by a filter (``queue``, ``states``, ``mine``, an admin's ``user``),
never both. Named jobs are resolved first: if any reference is unknown or ambiguous nothing
is cancelled and the answer lists each problem. Then one write transaction records the
cancel of every chosen job still live; ``dry_run`` stops before it and says what would be
cancelled. A user reaches only their own jobs; an admin, everyone's.

No postponed annotations in this module: FastAPI reads the routes' annotations.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import select, update

from hetsched.controlplane.api.job_refs import MAX_REF, resolve_job
from hetsched.controlplane.context import Service
from hetsched.controlplane.storage.store import TERMINAL_STATES, Principal
from hetsched.controlplane.storage.tables import jobs

__all__ = ["MAX_BULK", "CancelRequest", "add_cancel_routes"]

#: the most jobs one request cancels (a filter that matches more is refused: narrow it)
MAX_BULK = 50_000


class CancelRequest(BaseModel):
    """Which jobs to cancel: ``ids``, or a filter."""

    model_config = ConfigDict(extra="forbid", strict=True)

    ids: list[Annotated[str, Field(min_length=1, max_length=MAX_REF)]] | None = Field(
        default=None, min_length=1, max_length=10_000
    )
    queue: str | None = Field(default=None, min_length=1, max_length=63)
    #: live states only: a finished job has nothing to cancel (default: both)
    states: list[Literal["pending", "running"]] | None = Field(default=None, min_length=1)
    #: only the caller's own jobs (an admin's filter reaches everyone's otherwise)
    mine: bool = False
    #: only this user's jobs (admins)
    user: str | None = Field(default=None, min_length=1, max_length=63)
    dry_run: bool = False

    @model_validator(mode="after")
    def _one_way(self) -> "CancelRequest":
        filtered = self.queue is not None or self.states is not None or self.mine or self.user
        if self.ids is not None and filtered:
            raise ValueError("give ids or a filter (queue, states, mine, user), not both")
        if self.ids is None and not filtered:
            raise ValueError("give ids, or a filter (queue, states, mine, user)")
        return self


def add_cancel_routes(
    app: FastAPI, service: Service, caller: Callable[[Request], Awaitable[Principal]]
) -> None:
    """``POST /v1/jobs/cancel``."""
    Caller = Annotated[Principal, Depends(caller)]

    @app.post("/v1/jobs/cancel", tags=["jobs"])
    def cancel_many(body: CancelRequest, who: Caller) -> dict[str, Any]:
        """Cancel many jobs at once, atomically: ``{"ids": [...]}`` (ids, unique names or
        id prefixes) or a filter ``{"queue": ..., "states": ["pending"], "mine": true}``.
        If a named job is unknown or ambiguous, nothing is cancelled (404 or 409, every
        problem listed). ``dry_run`` says what would be cancelled and changes nothing. The
        answer lists the jobs cancelled and those that had already ended."""
        if body.user is not None and not who.admin and body.user != who.user:
            raise HTTPException(403, "only an admin may cancel another user's jobs")
        rows = (
            _named(service, body.ids, who) if body.ids is not None else _chosen(service, body, who)
        )
        live = [r for r in rows if r["state"] not in TERMINAL_STATES]
        ended = [r for r in rows if r["state"] in TERMINAL_STATES]
        if not body.dry_run and live:
            done = _request_cancels(service, [r["id"] for r in live])
            ended += [r for r in live if r["id"] not in done]
            live = [r for r in live if r["id"] in done]
            for row in live:
                service.loop.cancelled(row["id"], who.user)
        return {
            "dry_run": body.dry_run,
            "cancelled": [_brief(r) for r in live],
            "already_ended": [_brief(r) for r in ended],
        }


def _named(service: Service, refs: list[str], who: Principal) -> list[dict[str, Any]]:
    """The jobs ``refs`` name, each once; 404/409 listing every reference that names none
    or several (nothing is cancelled then)."""
    rows: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    several: list[str] = []
    for ref in dict.fromkeys(refs):
        try:
            row = resolve_job(service.store, ref, who)
        except HTTPException as exc:
            if exc.status_code == 409:
                detail: dict[str, Any] = exc.detail  # type: ignore[assignment]
                several += [f"{ref}: " + "; ".join(detail["errors"])]
            else:
                missing.append(ref)
            continue
        rows.setdefault(row["id"], row)
    if missing or several:
        status = 409 if several else 404
        lines = [f"{ref}: no such job" for ref in missing] + several
        raise HTTPException(status, {"message": "nothing was cancelled", "errors": lines})
    return list(rows.values())


def _chosen(service: Service, body: CancelRequest, who: Principal) -> list[dict[str, Any]]:
    """The live jobs the filter chooses, oldest first."""
    query = select(jobs).where(jobs.c.state.in_(body.states or ["pending", "running"]))
    owner = who.user if (body.mine or not who.admin) else body.user
    if owner is not None:
        query = query.where(jobs.c.owner == owner)
    if body.queue is not None:
        query = query.where(jobs.c.queue == body.queue)
    with service.store.read() as conn:
        rows = conn.execute(query.order_by(jobs.c.seq).limit(MAX_BULK + 1)).all()
    if len(rows) > MAX_BULK:
        raise HTTPException(422, f"the filter matches more than {MAX_BULK:,} jobs: narrow it")
    return [dict(r._mapping) for r in rows]


def _request_cancels(service: Service, job_ids: list[str]) -> set[str]:
    """Record the cancel of every job of ``job_ids`` still live, in one transaction; the
    ids it was recorded for."""
    done: set[str] = set()
    with service.store.write() as conn:
        for start in range(0, len(job_ids), 500):
            chunk = job_ids[start : start + 500]
            live = conn.execute(
                select(jobs.c.id).where(jobs.c.id.in_(chunk), jobs.c.state.not_in(TERMINAL_STATES))
            ).scalars()
            ids = list(live)
            if ids:
                conn.execute(update(jobs).where(jobs.c.id.in_(ids)).values(cancel_requested=True))
            done.update(ids)
    return done


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "user": row["owner"], "state": row["state"]}
