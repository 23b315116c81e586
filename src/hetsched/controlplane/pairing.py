"""Running one process of a standby pair (``--lease``), for ``hetsched up`` and
``hetsched federation up`` alike (docs/service.md, "A standby pair").

The process starts as a standby: it serves ``standby`` (reads from the store, a redirect to
the leader for the rest) and tries to take the lease every :data:`POLL_S`. Once it has it,
its :class:`~hetsched.controlplane.leadership.Keeper` renews it, and only then ``lead``
builds the service (its store fenced by the lease's epoch) whose app is swapped in. A
leader that loses its lease ends its process at once (exit status :data:`LOST`), as
kube-scheduler does: a supervisor starts it again, as a standby. A clean stop hands the
lease on at once.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hetsched.controlplane.leadership import Keeper, LeaseBook
from hetsched.controlplane.serving import quiet_signals
from hetsched.controlplane.storage.store import Store

__all__ = [
    "LOST",
    "POLL_S",
    "Leader",
    "Switch",
    "holder_id",
    "require_shared_store",
    "run_pair",
    "serve_as_pair",
]

log = logging.getLogger("hetsched.pair")

#: seconds between a standby's tries to take the lease
POLL_S = 0.5
#: exit status of a leader that lost its lease
LOST = 3


def holder_id() -> str:
    """This process among every process that may take a lease: host, pid and a nonce."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Switch:
    """An ASGI app that hands each request to the app of the moment: the standby's, then,
    once this process leads, the service's."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


@dataclass
class Leader:
    """What a process that took the lease runs: its app, how it stops, what it says."""

    app: Any
    close: Callable[[], None]
    announce: Callable[[], None] = lambda: None


@dataclass
class _Pair:
    book: LeaseBook
    switch: Switch
    lead: Callable[[Keeper], Leader]
    what: str
    stop: threading.Event = field(default_factory=threading.Event)
    keeper: Keeper | None = None
    leader: Leader | None = None

    def step_down(self, why: str) -> None:
        """The end of a leader that lost its lease: at once, before it can start anything."""
        log.error("%s: stepping down", why)
        print(f"{self.what}: {why}; stepping down (exit {LOST})", file=sys.stderr, flush=True)
        os._exit(LOST)


def _campaign(pair: _Pair) -> None:
    """Wait for the lease, then lead: the keeper first, then the service."""
    held = None
    while held is None and not pair.stop.is_set():
        try:
            held = pair.book.take()
        except Exception as exc:  # the store is unreachable: a standby keeps trying
            log.warning("lease %s: cannot take it: %s", pair.book.name, exc)
        if held is None:
            pair.stop.wait(POLL_S)
    if held is None:
        return
    began = time.monotonic()
    keeper = pair.keeper = Keeper(pair.book, pair.step_down)
    keeper.start()
    try:
        leader = pair.leader = pair.lead(keeper)
    except BaseException as exc:
        log.exception("%s: could not start as the leader", pair.what)
        print(f"{pair.what}: could not start as the leader: {exc}", file=sys.stderr, flush=True)
        os._exit(1)
    pair.switch.app = leader.app
    leader.announce()
    print(
        f"{pair.what}: leading under lease {held.name}, epoch {held.epoch} "
        f"(ready {time.monotonic() - began:.1f}s after taking it)",
        flush=True,
    )


def run_pair(
    book: LeaseBook,
    standby: Any,
    lead: Callable[[Keeper], Leader],
    server: Callable[[Any], Any],
    what: str,
) -> None:
    """Serve ``standby``, then what ``lead`` builds once this process takes ``book``'s
    lease, until ``server(app)`` (a uvicorn server of ``app``) stops."""
    pair = _Pair(book, Switch(standby), lead, what)
    campaign = threading.Thread(target=_campaign, args=(pair,), name="campaign", daemon=True)
    campaign.start()
    print(
        f"{what}: standby at {book.url} under lease {book.name} ({book.lease_s:g}s); "
        "it leads once the lease is free",
        flush=True,
    )
    try:
        server(pair.switch).run()
    finally:
        pair.stop.set()
        campaign.join(timeout=5)
        _close(pair)


def _close(pair: _Pair) -> None:
    """Stop leading: the keeper, the service, and the lease handed on at once (a standby
    takes over without waiting for it to expire)."""
    if pair.keeper is not None:
        pair.keeper.stop()
    if pair.leader is not None:
        pair.leader.close()
        try:
            pair.book.release()
        except Exception as exc:  # the store is gone: the lease expires by itself
            log.warning("lease %s: not released: %s", pair.book.name, exc)


def require_shared_store(db: str | None) -> None:
    """SystemExit unless ``db`` is a PostgreSQL URL: both processes of a pair reach it."""
    if db is None or not db.startswith("postgresql"):
        raise SystemExit(
            "--lease needs --db postgresql+psycopg://...: a store both processes of the pair reach"
        )


def serve_as_pair(
    store: Store,
    book: LeaseBook,
    lead: Callable[[Keeper], Leader],
    server: Callable[[Any], Any],
    what: str,
) -> None:
    """One process of a standby pair on ``store`` under ``book``'s lease, until SIGINT or
    SIGTERM (which only stop the server: the lease is handed on, the store closed)."""
    from hetsched.controlplane.api.auth import Authenticator
    from hetsched.controlplane.api.standby import standby_app

    quiet_signals()
    try:
        run_pair(book, standby_app(store, Authenticator(store), book.current), lead, server, what)
    finally:
        store.close()
