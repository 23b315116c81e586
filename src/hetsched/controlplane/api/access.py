"""Who is calling: the dependencies the routes put in front of their handlers.

A request carries a bearer token; each token is rate limited, and failed authentications
are rate limited per client address (429 with ``Retry-After``). An unknown or missing token
is 401; a user's token on an admin route is 403.

No postponed annotations in this module: FastAPI reads the dependencies' annotations.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool

from hetsched.controlplane.context import Service
from hetsched.controlplane.storage.store import Principal

__all__ = ["admin_dependency", "authenticated_dependency", "caller_dependency"]


def caller_dependency(service: Service) -> Callable[[Request], Principal]:
    """The dependency that authenticates a request: its bearer token, rate limited per
    token, failures rate limited per client address."""

    def caller(request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        client = request.client.host if request.client else "?"
        principal = None
        if scheme.lower() == "bearer" and token:
            principal = service.auth.principal(token.strip())
        if principal is None:
            wait = service.auth_failures.allow(client)
            if wait:
                raise HTTPException(
                    429, "too many failed authentications", {"Retry-After": f"{wait:.0f}"}
                )
            raise HTTPException(401, "authentication required", {"WWW-Authenticate": "Bearer"})
        wait = service.limiter.allow(principal.token_id)
        if wait:
            raise HTTPException(429, "rate limit exceeded", {"Retry-After": f"{max(wait, 1):.0f}"})
        return principal

    return caller


def authenticated_dependency(
    service: Service, caller: Callable[[Request], Principal]
) -> Callable[[Request], Awaitable[Principal]]:
    """``caller`` as the routes' dependency: on the event loop when the token is in the
    authenticator's cache (no I/O: a lookup and the rate limiter), in the thread pool when
    the store must be read. A thread hop per request cost as much as the lookup itself."""

    async def authenticated(request: Request) -> Principal:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and service.auth.cached(token.strip()) is not None:
            return caller(request)
        return await run_in_threadpool(caller, request)

    return authenticated


def admin_dependency(
    authenticated: Callable[[Request], Awaitable[Principal]],
) -> Callable[..., Principal]:
    """The dependency of the admin routes: an authenticated caller that is an admin (403
    for anyone else)."""

    def admin_only(who: Annotated[Principal, Depends(authenticated)]) -> Principal:
        if not who.admin:
            raise HTTPException(403, "admin only")
        return who

    return admin_only
