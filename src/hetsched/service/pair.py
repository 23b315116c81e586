"""A standby pair: ``hetsched up --lease NAME`` twice on one PostgreSQL (docs/service.md,
"A standby").

Each process starts as a standby: it serves the standby app (reads from the store, a
redirect to the leader for the rest; :func:`hetsched.controlplane.standby_app`) and tries
to take the lease every :data:`POLL_S`. The one that takes it starts its keeper (renewals)
and only then builds the service as ``hetsched up`` does (its store fenced by the lease's
epoch, nothing started unless the lease is surely still held), and swaps its app in. A
leader that loses its lease ends its process at once (exit status 3), as kube-scheduler
does; run it under a supervisor that starts it again, as a standby.

The pair shares the home (one machine, or a home on shared storage): the instance id, the
admin token and the tasks' files, so the new leader adopts the old one's tasks (with Ray,
its node agents) exactly as a restart on the same home does.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from hetsched.controlplane import Authenticator, Keeper, LeaseBook, standby_app
from hetsched.service.server import (
    Built,
    Options,
    announce,
    build,
    check_tls,
    close,
    open_home,
    quiet_signals,
    uvicorn_config,
)

__all__ = ["POLL_S", "Switch", "serve_pair"]

log = logging.getLogger("hetsched.service")

#: seconds between a standby's tries to take the lease
POLL_S = 0.5
#: exit status of a leader that lost its lease
LOST = 3


class Switch:
    """An ASGI app that hands each request to the app of the moment: the standby's, then,
    once this process leads, the service's."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


@dataclass
class _Pair:
    options: Options
    book: LeaseBook
    switch: Switch
    stop: threading.Event = field(default_factory=threading.Event)
    keeper: Keeper | None = None
    built: Built | None = None


def _step_down(why: str) -> None:
    """The end of a leader that lost its lease: at once, before it can start anything."""
    log.error("%s: stepping down", why)
    print(f"hetsched up: {why}; stepping down (exit {LOST})", file=sys.stderr, flush=True)
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
    keeper = pair.keeper = Keeper(pair.book, _step_down)
    keeper.start()
    try:
        built = pair.built = build(pair.options, fence=pair.book.fence)
    except BaseException as exc:
        log.exception("hetsched up: could not start as the leader")
        print(f"hetsched up: could not start as the leader: {exc}", file=sys.stderr, flush=True)
        os._exit(1)
    margin = keeper.every_s
    assert built.runner is not None
    built.runner.leading = lambda: time.time() < keeper.valid_until - margin
    pair.switch.app = built.app
    announce(pair.options, built)
    print(
        f"hetsched up: leading under lease {held.name}, epoch {held.epoch} "
        f"(ready {time.monotonic() - began:.1f}s after taking it)",
        flush=True,
    )


def serve_pair(options: Options) -> None:
    """Run as one process of a standby pair until SIGINT or SIGTERM."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    assert options.lease is not None
    if options.db is None or not options.db.startswith("postgresql"):
        raise SystemExit(
            "--lease needs --db postgresql+psycopg://...: a store both processes of the pair reach"
        )
    tls, advertised = check_tls(options)
    store, _instance = open_home(options)
    holder = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
    book = LeaseBook(store, options.lease, holder, advertised.url, options.lease_s)
    pair = _Pair(options, book, Switch(standby_app(store, Authenticator(store), book.current)))
    server = uvicorn.Server(uvicorn_config(pair.switch, options, tls))
    campaign = threading.Thread(target=_campaign, args=(pair,), name="campaign", daemon=True)
    campaign.start()
    print(
        f"hetsched up: standby at {advertised.url} under lease {options.lease} "
        f"({options.lease_s:g}s); it leads once the lease is free",
        flush=True,
    )
    quiet_signals()
    try:
        server.run()
    finally:
        pair.stop.set()
        campaign.join(timeout=5)
        _close(pair)
        store.close()
    print("hetsched up: stopped; running tasks keep running and are adopted by the leader")
    sys.stdout.flush()


def _close(pair: _Pair) -> None:
    """Stop leading: the keeper, the service, and the lease handed on at once (a standby
    takes over without waiting for it to expire)."""
    if pair.keeper is not None:
        pair.keeper.stop()
    if pair.built is not None:
        close(pair.built)
        try:
            pair.book.release()
        except Exception as exc:  # the store is gone: the lease expires by itself
            log.warning("lease %s: not released: %s", pair.book.name, exc)
