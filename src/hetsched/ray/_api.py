"""The Ray calls hetsched makes, typed in one place (some of Ray's are untyped), and the one
way a hetsched process connects to a cluster."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["connect", "connected", "disconnect", "keep_signal_handlers", "nodes"]


def connect(address: str, namespace: str | None = None) -> None:
    """Join the cluster at ``address`` (``HOST:PORT``) as a driver, once per process: Ray's
    own logging quiet, task output not copied to this process (hetsched moves logs itself).
    The process's SIGTERM and SIGINT handlers stay as they were."""
    import ray

    if ray.is_initialized():
        return
    with keep_signal_handlers():
        ray.init(
            address=address,
            namespace=namespace,
            logging_level=logging.ERROR,
            log_to_driver=False,
            configure_logging=False,
        )


def disconnect() -> None:
    import ray

    with keep_signal_handlers():
        ray.shutdown()


@contextlib.contextmanager
def keep_signal_handlers() -> Iterator[None]:
    """``ray.init`` and ``ray.shutdown`` install their own SIGTERM handler: put back the
    process's own afterwards (only the main thread can)."""
    import signal

    main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def connected() -> bool:
    import ray

    return bool(ray.is_initialized())


def nodes() -> list[dict[str, Any]]:
    """Ray's node table: alive and dead nodes (``NodeID``, ``Alive``, ``Resources``, ``Labels``,
    ``NodeManagerHostname``, ``DeathReasonMessage``, ...)."""
    import ray

    table: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return table
