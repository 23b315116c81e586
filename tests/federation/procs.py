"""Real processes for the failover tests: members and a federation as `hetsched` commands,
and a TCP proxy that can drop traffic (a partition), all on 127.0.0.1.

Every wait is bounded; every process is stopped by its PID (a member's tasks, which run in
their own sessions, by the PIDs found carrying its instance in their environment).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from fed_fixtures import cluster_yaml

from hetsched.controlplane import free_port

__all__ = ["FederationProcess", "MemberProcess", "Proxy", "kill_tasks_of"]

_CLI = [sys.executable, "-c", "from hetsched.cli.main import main; main()"]


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not become healthy in {timeout:g}s: {log.read_text()[-2000:]}")


class _Server:
    """A `hetsched` server command on a fixed port, restartable on the same home."""

    def __init__(self, argv: list[str], home: Path, port: int, log: Path) -> None:
        self.argv = argv
        self.home = home
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self) -> None:
        """Start the process (see :meth:`wait`)."""
        handle = open(self.log, "ab")  # noqa: SIM115 - the child keeps it
        try:
            self.proc = subprocess.Popen(
                self.argv, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        finally:
            handle.close()

    def wait(self, timeout: float = 90.0) -> None:
        """Until it answers ``/healthz``."""
        assert self.proc is not None
        _wait_healthy(self.url, self.proc, self.log, timeout)

    def start(self, timeout: float = 90.0) -> None:
        self.launch()
        self.wait(timeout)

    @property
    def token(self) -> str:
        return (self.home / "admin.token").read_text().strip()

    def kill(self) -> None:
        """SIGKILL the server process (its tasks, in their own sessions, live on)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class MemberProcess(_Server):
    """`hetsched up` for member ``name`` (its devices from fed_fixtures.MEMBER_DEVICES)."""

    def __init__(self, tmp: Path, name: str) -> None:
        folder = tmp / f"member-{name}"
        folder.mkdir(parents=True, exist_ok=True)
        cluster = folder / "cluster.yaml"
        cluster.write_text(cluster_yaml(name))
        home = folder / "home"
        port = free_port()
        argv = [
            *_CLI,
            "up",
            "--home",
            str(home),
            "--port",
            str(port),
            "--cluster",
            str(cluster),
            "--node-name",
            f"{name}-local",
            "--kill-grace",
            "1",
            "--rate-limit",
            "0",
            "--sync",
            "NORMAL",
        ]
        super().__init__(argv, home, port, folder / "server.log")
        self.name = name

    def stop(self) -> None:
        super().stop()
        kill_tasks_of(self.home)


class FederationProcess(_Server):
    """`hetsched federation up` with ``members`` (a members.yaml)."""

    def __init__(self, tmp: Path, members: Path, name: str = "federation", **options: Any) -> None:
        home = tmp / name
        port = free_port()
        argv = [*_CLI, "federation", "up", "--members", str(members), "--home", str(home)]
        argv += ["--port", str(port), "--rate-limit", "0", "--sync", "NORMAL"]
        for flag, value in options.items():
            argv += [f"--{flag.replace('_', '-')}", str(value)]
        super().__init__(argv, home, port, tmp / f"{name}.log")


def kill_tasks_of(home: Path) -> list[int]:
    """SIGKILL every task process group of the member whose home is ``home``."""
    try:
        instance = (home / "instance").read_text().strip()
    except OSError:
        return []
    killed = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("HETSCHED_INSTANCE") != instance:
                continue
            os.killpg(proc.pid, signal.SIGKILL)
            killed.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return killed


class Proxy:
    """A TCP proxy from a free port on 127.0.0.1 to ``target``. :meth:`partition` drops
    traffic both ways (connections are held open and what arrives is read and discarded,
    as a black hole would); :meth:`heal` forwards again (new connections; the held ones
    stay dropped, as after a real partition their peers give up on them)."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.dropping = False
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="proxy").start()

    def partition(self) -> None:
        self.dropping = True

    def heal(self) -> None:
        self.dropping = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
        with contextlib.suppress(OSError):
            # wakes the accepting thread: closing alone leaves accept() blocked on Linux
            self.listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.listener.close()

    def _keep(self, sock: socket.socket) -> None:
        """Keep ``sock`` to close with the proxy; one accepted or opened while the proxy
        was closing is closed at once (else nothing would ever close it)."""
        with self._lock:
            if not self._closed:
                self._sockets.append(sock)
                return
        with contextlib.suppress(OSError):
            sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self._keep(client)
            if self.dropping:
                threading.Thread(target=self._drain, args=(client,), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                with contextlib.suppress(OSError):
                    client.close()
                continue
            self._keep(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _drain(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while sock.recv(65536):
                pass

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if self.dropping:
                    continue  # dropped on the floor, both ways
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
