"""Serving an app in-process on a free loopback port, for tests and benchmarks of either
control plane (``hetsched up``, ``hetsched federation up``)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from hetsched.tls import ServerTls

__all__ = ["free_port", "serve"]


def free_port() -> int:
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
