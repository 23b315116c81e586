"""Running a federation in-process on a free loopback port, for tests and benchmarks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from hetsched.controlplane import serve
from hetsched.federation.server import Built, FederationOptions, build, close

__all__ = ["RunningFederation", "running_federation"]


@dataclass
class RunningFederation:
    built: Built
    url: str
    admin_token: str


@contextmanager
def running_federation(options: FederationOptions) -> Iterator[RunningFederation]:
    """The federation (store, members' workers, loop, uvicorn) on 127.0.0.1; stopped on
    exit (jobs on the members are theirs to stop: their lease runs out)."""
    built = build(options)
    try:
        server, thread, port = serve(built.app, built.tls)
    except RuntimeError:
        close(built)
        raise
    token = built.admin_token or built.token_file.read_text().strip()
    try:
        scheme = "https" if built.tls is not None else "http"
        yield RunningFederation(built, f"{scheme}://127.0.0.1:{port}", token)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        close(built)
