"""Create, list and revoke API tokens: admins only. A token is shown once, when it is
created; the store keeps only its digest (controlplane/api/auth.py).

No postponed annotations in this module: FastAPI reads the routes' annotations.
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from hetsched.controlplane.context import Service
from hetsched.controlplane.storage.store import Principal

__all__ = ["TokenRequest", "add_token_routes"]


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    user: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    admin: bool = False


def add_token_routes(app: FastAPI, service: Service, admin_only: Callable[..., Principal]) -> None:
    """Create, list and revoke tokens: admins only."""
    Admin = Annotated[Principal, Depends(admin_only)]

    @app.post("/v1/tokens", status_code=201, tags=["tokens"])
    def create_token(body: TokenRequest, who: Admin) -> dict[str, Any]:
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
