"""Running the real service in-process on a free loopback port, for tests and benchmarks."""

from __future__ import annotations

import contextlib
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

from hetsched.agent.executor import Executor
from hetsched.controlplane import free_port, serve
from hetsched.drivers.executor import KeepsExits, ProcessExecutor
from hetsched.service.server import Built, Options, build

__all__ = ["Running", "ServerProcess", "free_port", "running", "serve"]


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
    server, thread, port = serve(built.app, built.tls)
    token = built.admin_token or built.token_file.read_text().strip()
    url = f"{'https' if built.tls is not None else 'http'}://127.0.0.1:{port}"
    checkpoints = built.service.loop.checkpoints
    if checkpoints is not None:
        checkpoints.api = url  # tasks report here
    try:
        yield Running(built, url, token)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        built.service.loop.stop()
        executor = built.service.executor
        assert executor is not None
        if not keep_tasks:
            _kill_tasks(executor)
        executor.shutdown()
        if built.service.store.health.outage is None and isinstance(executor, KeepsExits):
            executor.forget_journal()
        built.service.store.close()


def _kill_tasks(executor: ProcessExecutor) -> None:
    """SIGKILL every task of the executor's instance and reap the processes it started."""
    executor.sweep(live_keys=())
    if not isinstance(executor, Executor):
        return
    for handle in list(executor.handles.values()):
        if handle.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                handle.popen.wait(timeout=10)


class ServerProcess:
    """``hetsched up`` as a subprocess on ``home`` (for kill -9 tests and benchmarks): the
    same home across restarts, a fresh free port at each start, output appended to
    ``log``. With ``verify`` (the CA its ``--tls-cert`` is checked with) it is reached over
    https."""

    def __init__(
        self,
        home: Path,
        args: Sequence[str],
        log: Path | None = None,
        verify: ssl.SSLContext | None = None,
        port: int | None = None,
    ) -> None:
        self.home = home
        self.args = list(args)
        #: the port of every start (None: a fresh free one each time)
        self.fixed_port = port
        self.verify: ssl.SSLContext | bool = verify if verify is not None else True
        self.scheme = "https" if verify is not None else "http"
        self.port = 0
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_path = log or home.parent / "server.log"
        self._log: IO[bytes] | None = None

    def argv(self) -> list[str]:
        entry = "from hetsched.cli.main import main; main()"
        up = ["up", "--home", str(self.home), "--port", str(self.port)]
        return [sys.executable, "-c", entry, *up, *self.args]

    def launch(self) -> None:
        """Start the process and return at once (a test may kill it while it starts)."""
        self.port = self.fixed_port or free_port()
        self.url = f"{self.scheme}://127.0.0.1:{self.port}"
        if self._log is None:
            self._log = open(self._log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.argv(), stdout=self._log, stderr=subprocess.STDOUT)

    def start(self, timeout_s: float = 60.0) -> None:
        """Start and wait until ``/healthz`` answers; raises if the process exits first."""
        self.launch()
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise RuntimeError(f"hetsched up exited with {code}; see {self._log_path}")
            with contextlib.suppress(httpx.TransportError):
                answer = httpx.get(f"{self.url}/healthz", timeout=1.0, verify=self.verify)
                if answer.status_code == 200:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"hetsched up did not become ready in {timeout_s:g}s")

    @property
    def token(self) -> str:
        return (self.home / "admin.token").read_text().strip()

    def client(self, timeout_s: float = 10.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout_s, verify=self.verify
        )

    def kill9(self) -> None:
        """SIGKILL the service (its tasks run on, in their own sessions)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM and wait (tasks keep running, as after ``hetsched up`` stops)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill9()
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill_tasks(self) -> list[int]:
        """SIGKILL every task process group of this home's instance (the test's cleanup)."""
        instance = (self.home / "instance").read_text().strip()
        return Executor(self.home, instance).sweep(live_keys=())

    def log_text(self) -> str:
        try:
            return self._log_path.read_text(errors="replace")
        except OSError:
            return ""
