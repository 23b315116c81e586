"""Serving an app in-process on a free loopback port, for tests and benchmarks of either
control plane (``hetsched up``, ``hetsched federation up``)."""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from typing import Any

import uvicorn

from hetsched.tls import ServerTls

__all__ = ["free_port", "serve"]


#: ports below the kernel's ephemeral range (32768 and up by default), in blocks of
#: ``_BLOCK``: one block for each pytest-xdist worker
_FIRST, _BLOCK, _BLOCKS = 20_000, 500, 25
_next: dict[str, int] = {}


def free_port() -> int:
    """A loopback port nothing listens on now, for a server about to start.

    A port the kernel hands out for ``bind(0)`` comes from its ephemeral range, where an
    outgoing connection, or a server of another test running beside this one, may take it
    before the server binds it. Under pytest-xdist each worker therefore probes ports of
    its own block below that range, from a random start; elsewhere the kernel picks."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else -1
    if 0 <= index < _BLOCKS:
        base = _FIRST + index * _BLOCK
        offset = _next.get(worker, random.randrange(_BLOCK))
        for step in range(_BLOCK):
            port = base + (offset + step) % _BLOCK
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _next[worker] = (offset + step + 1) % _BLOCK
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(app: Any, tls: ServerTls | None = None) -> tuple[uvicorn.Server, threading.Thread, int]:
    """``app`` served by uvicorn on a free loopback port (HTTPS with ``tls``), from a daemon
    thread, once it answers; stop it with ``server.should_exit = True`` and join the
    thread."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="error",
        lifespan="off",
        **(tls.uvicorn() if tls is not None else {}),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    return server, thread, port
