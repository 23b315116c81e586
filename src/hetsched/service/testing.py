"""Running the real service in-process on a free loopback port, for tests and benchmarks."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn

from hetsched.agent.executor import Executor
from hetsched.service.server import Built, Options, build

__all__ = ["Running", "free_port", "running"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Running:
    built: Built
    url: str
    admin_token: str


@contextmanager
def running(options: Options, keep_tasks: bool = False) -> Iterator[Running]:
    """The service (store, loop, executor, uvicorn) on 127.0.0.1; stopped on exit.

    On exit the instance's task processes are killed, so none outlives the test, unless
    ``keep_tasks`` (a test of adoption: the next start on the same home takes them over, as
    after a real stop, and its own exit kills them).
    """
    built = build(options)
    port = free_port()
    config = uvicorn.Config(
        built.app, host="127.0.0.1", port=port, log_level="error", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    token = built.admin_token or built.token_file.read_text().strip()
    try:
        yield Running(built, f"http://127.0.0.1:{port}", token)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        built.service.loop.stop()
        if not keep_tasks:
            _kill_tasks(built.service.executor)
        built.service.executor.shutdown()
        built.service.store.close()


def _kill_tasks(executor: Executor) -> None:
    """SIGKILL every process group of the executor's instance and reap the ones it started."""
    executor.sweep(live_keys=())
    for handle in list(executor.handles.values()):
        if handle.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                handle.popen.wait(timeout=10)
