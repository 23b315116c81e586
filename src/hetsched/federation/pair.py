"""``hetsched federation up --lease NAME``: one process of a standby pair of federation
front-ends on one PostgreSQL (the pair itself is :func:`hetsched.controlplane.run_pair`).

The pair shares the federation's home (its lease bounds and member state files) as well
as the store, so the one that takes over rejoins the members exactly as a restart on the
same home does: within the federation's lease at each member, its jobs are taken back
and none is sent twice (docs/federation.md).
"""

from __future__ import annotations

import logging
import signal
import sys

from hetsched.controlplane import (
    Authenticator,
    Keeper,
    Leader,
    LeaseBook,
    holder_id,
    run_pair,
    standby_app,
)
from hetsched.federation.server import (
    FederationOptions,
    announce,
    build,
    check_tls,
    close,
    open_store,
    uvicorn_config,
)

__all__ = ["serve_pair"]


def serve_pair(options: FederationOptions) -> None:
    """Run as one process of a standby pair until SIGINT or SIGTERM."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    assert options.lease is not None
    if options.db is None or not options.db.startswith("postgresql"):
        raise SystemExit(
            "--lease needs --db postgresql+psycopg://...: a store both processes of the pair reach"
        )
    tls = check_tls(options)
    store = open_store(options)
    scheme = "https" if tls is not None else "http"
    url = options.advertise_url or f"{scheme}://{options.host}:{options.port}"
    book = LeaseBook(store, options.lease, holder_id(), url.rstrip("/"), options.lease_s)

    def lead(_keeper: Keeper) -> Leader:
        built = build(options, fence=book.fence)
        return Leader(built.app, lambda: close(built), lambda: announce(options, built))

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda _sig, _frame: None)
    try:
        run_pair(
            book,
            standby_app(store, Authenticator(store), book.current),
            lead,
            lambda app: uvicorn.Server(uvicorn_config(app, options, tls)),
            "hetsched federation",
        )
    finally:
        store.close()
    print("hetsched federation: stopped; the other process of the pair takes over")
    sys.stdout.flush()
