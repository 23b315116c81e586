"""``hetsched federation up --lease NAME``: one process of a standby pair of federation
front-ends on one PostgreSQL (the pair itself is :func:`hetsched.controlplane.run_pair`).

The pair shares the federation's home (its lease bounds and member state files) as well
as the store, so the one that takes over rejoins the members exactly as a restart on the
same home does: within the federation's lease at each member, its jobs are taken back
and none is sent twice (docs/federation.md).
"""

from __future__ import annotations

import logging
import sys

from hetsched.controlplane import (
    Keeper,
    Leader,
    LeaseBook,
    api_server,
    holder_id,
    require_shared_store,
    serve_as_pair,
)
from hetsched.federation.server import (
    FederationOptions,
    announce,
    build,
    check_tls,
    close,
    open_store,
)

__all__ = ["serve_pair"]


def serve_pair(options: FederationOptions) -> None:
    """Run as one process of a standby pair until SIGINT or SIGTERM."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    assert options.lease is not None
    require_shared_store(options.db)
    tls = check_tls(options)
    store = open_store(options)
    scheme = "https" if tls is not None else "http"
    url = options.advertise_url or f"{scheme}://{options.host}:{options.port}"
    book = LeaseBook(store, options.lease, holder_id(), url.rstrip("/"), options.lease_s)

    def lead(_keeper: Keeper) -> Leader:
        built = build(options, fence=book.fence)
        return Leader(built.app, lambda: close(built), lambda: announce(options, built))

    serve_as_pair(
        store,
        book,
        lead,
        lambda app: api_server(app, options.host, options.port, tls),
        "hetsched federation",
    )
    print("hetsched federation: stopped; the other process of the pair takes over")
    sys.stdout.flush()
