"""Serving the control plane's API: one uvicorn server however the control plane runs
(``hetsched up``, ``hetsched federation up``, either as one of a standby pair)."""

from __future__ import annotations

import signal
from typing import Any

from hetsched.tls import ServerTls

__all__ = ["api_server", "quiet_signals"]


def api_server(app: Any, host: str, port: int, tls: ServerTls | None) -> Any:
    """A uvicorn server of ``app`` (a ``uvicorn.Server``): https with ``tls``, no access
    log, the fastest HTTP parser and event loop installed (httptools and uvloop)."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        **(tls.uvicorn() if tls is not None else {}),
        http="auto",
        loop="auto",
    )
    return uvicorn.Server(config)


def quiet_signals() -> None:
    """uvicorn re-raises the signal it stopped for once it is done; these handlers make
    that a no-op so the loop and the store close cleanly and the exit status is 0."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda _sig, _frame: None)
