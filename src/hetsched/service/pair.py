"""``hetsched up --lease NAME``: one process of a standby pair on one PostgreSQL
(docs/service.md, "A standby pair"; the pair itself is
:func:`hetsched.controlplane.run_pair`).

The pair shares the home (one machine, or a home on shared storage): the instance id, the
admin token and the tasks' files, so the new leader adopts the old one's tasks (with Ray,
through the same node agents) exactly as a restart on the same home does. A leader starts
no task unless its lease is surely held: renewed less than two thirds of a lease ago.
"""

from __future__ import annotations

import logging
import sys
import time

from hetsched.controlplane import (
    Keeper,
    Leader,
    LeaseBook,
    api_server,
    holder_id,
    require_shared_store,
    serve_as_pair,
)
from hetsched.service.server import (
    Options,
    announce,
    build,
    check_tls,
    close,
    open_home,
)

__all__ = ["serve_pair"]


def serve_pair(options: Options) -> None:
    """Run as one process of a standby pair until SIGINT or SIGTERM."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    assert options.lease is not None
    require_shared_store(options.db)
    tls, advertised = check_tls(options)
    store, _instance = open_home(options)
    book = LeaseBook(store, options.lease, holder_id(), advertised.url, options.lease_s)

    def lead(keeper: Keeper) -> Leader:
        built = build(options, fence=book.fence)
        assert built.runner is not None
        margin = keeper.every_s
        built.runner.leading = lambda: time.time() < keeper.valid_until - margin
        return Leader(built.app, lambda: close(built), lambda: announce(options, built))

    serve_as_pair(
        store,
        book,
        lead,
        lambda app: api_server(app, options.host, options.port, tls),
        "hetsched up",
    )
    print("hetsched up: stopped; running tasks keep running and are adopted by the leader")
    sys.stdout.flush()
