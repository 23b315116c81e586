"""Create, list and revoke API tokens: admins only. A token is shown once, when it is
created; the store keeps only its digest (controlplane/api/auth.py).

No postponed annotations in this module: FastAPI reads the routes' annotations.
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, field_validator
from sqlalchemy import select

from hetsched.controlplane.context import Service
from hetsched.controlplane.identity import check_user_name
from hetsched.controlplane.storage.store import Principal
from hetsched.controlplane.storage.tables import tokens

__all__ = ["TokenRequest", "add_token_routes"]


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    #: the one user-name rule, the same as a job's ``user`` (controlplane/identity.py)
    user: str
    admin: bool = False

    _user = field_validator("user")(lambda cls, v: check_user_name(v))


def add_token_routes(app: FastAPI, service: Service, admin_only: Callable[..., Principal]) -> None:
    """Create, list and revoke tokens: admins only."""
    Admin = Annotated[Principal, Depends(admin_only)]

    @app.post("/v1/tokens", status_code=201, tags=["tokens"])
    def create_token(body: TokenRequest, who: Admin) -> dict[str, Any]:
        if not body.admin and _ever_admin(service, body.user):
            # jobs belong to a name: a user token would read that admin's own jobs
            raise HTTPException(
                409,
                f"{body.user!r} is an admin's name (an admin token was issued for it): a "
                "user token for it would see that admin's jobs; choose another name, or "
                "issue an admin token",
            )
        token_id, token = service.store.create_token(body.user, body.admin)
        return {"id": token_id, "user": body.user, "admin": body.admin, "token": token}

    @app.get("/v1/tokens", tags=["tokens"])
    def list_tokens(who: Admin) -> list[dict[str, Any]]:
        return service.store.list_tokens()

    @app.delete("/v1/tokens/{token_id}", tags=["tokens"])
    def revoke_token(token_id: str, who: Admin) -> dict[str, Any]:
        if not service.store.revoke_token(token_id):
            raise HTTPException(404, f"no live token {token_id!r}")
        service.auth.forget()
        return {"id": token_id, "revoked": True}


def _ever_admin(service: Service, user: str) -> bool:
    """Whether an admin token was ever issued for ``user`` (revoked ones count: the jobs
    stay theirs)."""
    query = select(tokens.c.id).where(tokens.c.owner == user, tokens.c.admin).limit(1)
    with service.store.read() as conn:
        return conn.execute(query).first() is not None
