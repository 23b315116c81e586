"""Jobs named as people name them: by id, by a unique name, or by a unique id prefix.

A reference is looked up among the jobs the caller may see (a user's own; an admin's, all),
so a name or a prefix never reveals another user's job: what the caller cannot see answers
404, as an unknown id does. An exact id wins; otherwise the jobs of that name, or else the
jobs whose id starts with it; more than one is 409 with the candidates listed.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from sqlalchemy import or_, select

from hetsched.controlplane.storage.store import Principal, Store
from hetsched.controlplane.storage.tables import jobs

__all__ = ["MAX_CANDIDATES", "MAX_REF", "ambiguous", "candidates", "resolve_job"]

#: how many candidates an ambiguous reference lists
MAX_CANDIDATES = 10
#: the longest reference looked up (the longest job name)
MAX_REF = 253


def candidates(store: Store, ref: str, who: Principal, limit: int) -> list[dict[str, Any]]:
    """The jobs ``ref`` may mean, oldest first: those of that name, or (when none has it)
    those whose id starts with it; at most ``limit``."""
    query = select(jobs).where(or_(jobs.c.name == ref, jobs.c.id.startswith(ref, autoescape=True)))
    if not who.admin:
        query = query.where(jobs.c.owner == who.user)
    with store.read() as conn:
        rows = [dict(r._mapping) for r in conn.execute(query.order_by(jobs.c.seq)).all()]
    named = [r for r in rows if r["name"] == ref]
    return (named or rows)[:limit]


def resolve_job(store: Store, ref: str, who: Principal) -> dict[str, Any]:
    """The one job ``ref`` names that ``who`` may see; 404 when none, 409 (listing the
    candidates) when several."""
    if not ref or len(ref) > MAX_REF:
        raise HTTPException(404, f"no job {ref!r}")
    row = store.job(ref) if len(ref) <= 32 else None
    if row is not None and (who.admin or row["owner"] == who.user):
        return row
    found = candidates(store, ref, who, MAX_CANDIDATES + 1)
    if not found:
        raise HTTPException(404, f"no job {ref!r}")
    if len(found) == 1:
        return found[0]
    raise HTTPException(409, ambiguous(ref, found))


def ambiguous(ref: str, found: list[dict[str, Any]]) -> dict[str, Any]:
    """The 409 detail of a reference that names several jobs: a message, one line per
    candidate (``errors``, as every error lists its lines) and the candidates themselves."""
    shown = found[:MAX_CANDIDATES]
    more = " (the first 10)" if len(found) > MAX_CANDIDATES else ""
    return {
        "message": f"{ref!r} names {len(found)}{'+' if more else ''} jobs{more}: give an id",
        "errors": [f"{r['id']}  {r['name']}  {r['owner']}  {r['state']}" for r in shown],
        "candidates": [
            {"id": r["id"], "name": r["name"], "user": r["owner"], "state": r["state"]}
            for r in shown
        ],
    }
