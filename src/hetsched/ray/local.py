"""A throwaway Ray cluster on this machine, for the demo and tests (``hetsched ray local``).

``LocalCluster`` starts a head (no CPUs, no GPUs, labelled not schedulable) and one raylet
per listed node (or only the raylets, joining a running cluster), each as
``ray start --block`` in its own process, with logical GPUs, ``accelerator_type:<MODEL>``
and labels naming the node and its model. It stops exactly what
it started: the ``ray start`` processes and every process they had started by then, by PID
(checked against its start time), never by name.

Contracts:
- Every node binds ``host`` (127.0.0.1 by default). Ray still opens some ports on every
  interface of the machine; tests run a cluster inside a network namespace with only
  loopback (see :mod:`hetsched.ray.testing`).
- Nodes are named ``<model>-<n>`` (``a100-0``, ``a100-1``, ``t4-0``, ``cpu-0``); the name is
  the node's ``hetsched.io/node`` label, which the inventory turns into the hetsched node name.
- With ``fake_devices`` each node's devices come from a ``fake`` backend file written for it
  (class gpu, the model, the count); without, hetsched takes Ray's logical GPUs as devices.
- The head's health checks are fast (``fast_health_checks``): a crashed raylet is declared
  dead after about 3 s instead of about 15 s with Ray's defaults, so tests of node death stay
  short.
- A ``ray start`` process dies with this process (parent-death signal), and Ray's own
  processes die with it, so nothing is left behind even if this process is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from hetsched.ray import labels

__all__ = [
    "LocalCluster",
    "LocalClusterError",
    "LocalNodeSpec",
    "parse_nodes",
]

#: at most this many raylets: each is a few processes and a few hundred MiB on this machine
MAX_NODES = 16
MAX_GPUS = 64
_MODEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,38}[A-Za-z0-9])?")
_OBJECT_STORE_BYTES = 100 * (1 << 20)
#: Ray's settings for a cluster that is quick to start and quick to stop
_RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
    "RAY_num_prestart_python_workers": "0",
}
#: the GCS's health checks of the raylets, when a dead node must be seen fast
_FAST_HEALTH_CHECKS = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}
_PR_SET_PDEATHSIG = 1
#: `ray start` through this Python, whatever PATH says
_RAY_START = (sys.executable, "-c", "from ray.scripts.scripts import main; main()", "start")
#: the ports a node opens besides worker ports; each node gets its own
_PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--metrics-export-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
)


class LocalClusterError(RuntimeError):
    """The cluster could not be started (the message holds the failing node's log tail)."""


@dataclass(frozen=True, slots=True)
class LocalNodeSpec:
    """One raylet: its hetsched name, its GPU model (None: a CPU-only node) and GPU count."""

    name: str
    model: str | None
    gpus: int

    def vendor(self) -> str:
        """The GPU vendor its fake devices claim (:func:`~hetsched.ray.labels.vendor_of`)."""
        return labels.vendor_of(self.model or "")


def parse_nodes(text: str) -> list[LocalNodeSpec]:
    """``"a100:2,t4:1,cpu:0"``: one node per entry, ``MODEL:GPUS``; ``cpu:0`` has no GPU.

    Raises ValueError naming the entry and what was expected."""
    entries = [e.strip() for e in text.split(",")]
    if not text.strip():
        raise ValueError("--nodes: expected MODEL:GPUS entries separated by commas, got nothing")
    if len(entries) > MAX_NODES:
        raise ValueError(f"--nodes: at most {MAX_NODES} nodes, got {len(entries)}")
    out: list[LocalNodeSpec] = []
    per_model: dict[str, int] = {}
    for number, entry in enumerate(entries, 1):
        where = f"--nodes: entry {number} ({entry!r})"
        model, sep, count_text = entry.partition(":")
        model = model.strip()
        if not sep or not model:
            raise ValueError(f"{where}: expected MODEL:GPUS, e.g. a100:2 or cpu:0")
        if not _MODEL.fullmatch(model):
            raise ValueError(
                f"{where}: the model must be 1-40 letters, digits, '.', '_' or '-', "
                "starting and ending with a letter or digit"
            )
        try:
            gpus = int(count_text.strip())
        except ValueError:
            raise ValueError(f"{where}: GPUS must be a whole number, got {count_text!r}") from None
        if model.lower() == "cpu":
            if gpus != 0:
                raise ValueError(f"{where}: a cpu node has no GPUs; write cpu:0")
            spec_model = None
        else:
            if not 1 <= gpus <= MAX_GPUS:
                raise ValueError(
                    f"{where}: a {model} node needs 1..{MAX_GPUS} GPUs (cpu:0 has none)"
                )
            spec_model = model.upper()
        key = model.lower()
        index = per_model.get(key, 0)
        per_model[key] = index + 1
        out.append(LocalNodeSpec(f"{key}-{index}", spec_model, gpus))
    return out


@dataclass(slots=True)
class _Started:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


@dataclass
class LocalCluster:
    nodes: Sequence[LocalNodeSpec]
    host: str = "127.0.0.1"
    #: the head's GCS port; 0 picks a free one
    port: int = 0
    #: logical CPUs and memory of each node (what hetsched offers; Ray does not enforce them)
    cpus: int = 4
    memory_mib: int = 8192
    fake_devices: bool = False
    ready_timeout_s: float = 120.0
    #: the address of a running cluster to add ``nodes`` to (no head is started then)
    join: str = ""
    #: health checks every second, a raylet dead after 3 failures (False: Ray's defaults)
    fast_health_checks: bool = True
    #: where the cluster keeps its Ray session, logs and fake device files (removed at stop)
    workdir: Path | None = None
    address: str = ""
    #: hetsched node name -> Ray node id, once started
    node_ids: dict[str, str] = field(default_factory=dict)
    _started: list[_Started] = field(default_factory=list)
    _own_workdir: bool = False

    # -- start -----------------------------------------------------------------------------

    def start(self, progress: Callable[[str], None] | None = None) -> str:
        """Start the head and the nodes; returns the address (``HOST:PORT``) once every node
        has joined. Raises LocalClusterError (after stopping what it started) on failure."""
        say = progress or (lambda _line: None)
        if self.workdir is None:
            # short: Ray's unix socket paths live under it and must stay under 108 bytes
            self.workdir = Path(tempfile.mkdtemp(prefix="hsray-", dir="/tmp"))
            self._own_workdir = True
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.ready_timeout_s
        try:
            if self.join:
                self.address = self.join
            else:
                port = self.port or _free_port(self.host)
                self.address = f"{self.host}:{port}"
                say("starting the head")
                head = self._launch("head", self._head_args(port), {})
                self._wait_for_port(head, port, deadline)
            for slot, spec in enumerate(self.nodes, 1):
                say(f"starting node {spec.name}")
                self._launch(spec.name, self._node_args(spec, slot), self._node_env(spec))
            say("waiting for the nodes to join")
            self.node_ids = self._wait_for_nodes(deadline)
        except BaseException:
            self.stop()
            raise
        return self.address

    def _common_args(self, slot: int) -> list[str]:
        """Flags of every node. Each node gets its own ports, picked here: raylets started
        side by side on one machine otherwise race for the same free port and crash."""
        assert self.workdir is not None
        ports = _free_ports(self.host, len(_PORT_FLAGS))
        return [
            *(
                arg
                for flag, port in zip(_PORT_FLAGS, ports, strict=True)
                for arg in (flag, str(port))
            ),
            "--min-worker-port",
            "0",
            "--max-worker-port",
            "0",
            "--block",
            "--node-ip-address",
            self.host,
            "--object-store-memory",
            str(_OBJECT_STORE_BYTES),
            "--include-log-monitor",
            "false",
            "--disable-usage-stats",
            # one per node: raylets that share a session directory race for the same
            # socket and log file names when they start side by side
            "--temp-dir",
            str(self.workdir / f"ray{slot}"),
        ]

    def _head_args(self, port: int) -> list[str]:
        return [
            *self._common_args(0),
            "--head",
            "--port",
            str(port),
            "--num-cpus",
            "0",
            "--num-gpus",
            "0",
            "--include-dashboard",
            "false",
            "--dashboard-port",
            str(_free_port(self.host)),
            "--ray-client-server-port",
            str(_free_port(self.host)),
            "--no-monitor",
            "--labels",
            f"{labels.SCHEDULABLE}=false,{labels.NODE}=head",
        ]

    def _node_args(self, spec: LocalNodeSpec, slot: int) -> list[str]:
        node_labels = {labels.NODE: spec.name}
        node_labels[labels.DISCOVERY] = "fake" if self.fake_devices else "ray"
        resources: dict[str, float] = {}
        if spec.model is not None:
            node_labels[labels.GPU_MODEL] = spec.model
            resources[f"accelerator_type:{spec.model}"] = 1.0
        args = [
            *self._common_args(slot),
            "--address",
            self.address,
            "--num-cpus",
            str(self.cpus),
            "--num-gpus",
            str(spec.gpus),
            "--memory",
            str(self.memory_mib * (1 << 20)),
            "--labels",
            ",".join(f"{k}={v}" for k, v in node_labels.items()),
        ]
        if resources:
            args += ["--resources", json.dumps(resources)]
        return args

    def _node_env(self, spec: LocalNodeSpec) -> dict[str, str]:
        if not self.fake_devices:
            return {}
        assert self.workdir is not None
        path = self.workdir / f"devices-{spec.name}.yaml"
        groups = []
        if spec.model is not None:
            groups.append(
                {"class": "gpu", "vendor": spec.vendor(), "model": spec.model, "count": spec.gpus}
            )
        path.write_text(json.dumps({"devices": groups}) + "\n")  # JSON is YAML
        return {labels.FAKE_DEVICES_ENV: str(path)}

    def _launch(self, name: str, args: list[str], extra_env: dict[str, str]) -> _Started:
        assert self.workdir is not None
        health = _FAST_HEALTH_CHECKS if self.fast_health_checks else {}
        env = {**os.environ, **_RAY_ENV, **health, **extra_env}
        # the fake file and the backend list are per node: never inherit ours
        for key in (labels.FAKE_DEVICES_ENV, labels.DISCOVERY_ENV):
            if key not in extra_env:
                env.pop(key, None)
        log = self.workdir / "logs" / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [*_RAY_START, *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        started = _Started(name, process, log)
        self._started.append(started)
        return started

    def _wait_for_port(self, head: _Started, port: int, deadline: float) -> None:
        while True:
            self._check_alive(head)
            with contextlib.suppress(OSError), socket.create_connection((self.host, port), 0.5):
                return
            if time.monotonic() > deadline:
                raise LocalClusterError(f"the head did not open {self.address} in time")
            time.sleep(0.2)

    def _wait_for_nodes(self, deadline: float) -> dict[str, str]:
        from hetsched.ray import _api

        want = {spec.name for spec in self.nodes}
        # a process that is a driver already (a test adding a node) stays one
        was_connected = _api.connected()
        _api.connect(self.address)
        try:
            while True:
                for started in self._started:
                    self._check_alive(started)
                seen = {
                    n["Labels"].get(labels.NODE, ""): str(n["NodeID"])
                    for n in _api.nodes()
                    if n["Alive"]
                }
                if want <= seen.keys():
                    return {name: seen[name] for name in want}
                if time.monotonic() > deadline:
                    missing = ", ".join(sorted(want - seen.keys()))
                    raise LocalClusterError(f"nodes {missing} did not join in time")
                time.sleep(0.3)
        finally:
            if not was_connected:
                _api.disconnect()

    def _check_alive(self, started: _Started) -> None:
        code = started.process.poll()
        if code is not None:
            raise LocalClusterError(
                f"node {started.name}: `ray start` exited with {code}:\n{_tail(started.log)}"
            )

    # -- while running ---------------------------------------------------------------------

    def pids(self) -> dict[str, int]:
        """Node name (``head`` included) -> pid of its ``ray start`` process."""
        return {s.name: s.process.pid for s in self._started}

    def raylet_pid(self, name: str) -> int | None:
        """The pid of the node's raylet, if it runs."""
        for started in self._started:
            if started.name != name:
                continue
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(started.process.pid).children(recursive=True):
                    if Path(child.exe()).name == "raylet":
                        return child.pid
        return None

    def exited(self) -> dict[str, int]:
        """Nodes whose ``ray start`` process has ended, with its exit code."""
        out: dict[str, int] = {}
        for started in self._started:
            code = started.process.poll()
            if code is not None:
                out[started.name] = code
        return out

    # -- stop ------------------------------------------------------------------------------

    def stop(self, timeout_s: float = 20.0) -> list[int]:
        """Stop every node (the nodes first, the head last): SIGTERM to each ``ray start``,
        then SIGKILL to whatever of its processes outlived it. Returns the pids that had to be
        killed. Idempotent."""
        killed: list[int] = []
        workers = [s for s in self._started if s.name != "head"]
        heads = [s for s in self._started if s.name == "head"]
        for group in (workers, heads):
            killed += _stop_all(group, timeout_s / 2)
        self._started = []
        if self._own_workdir and self.workdir is not None:
            # a node whose raylet died has orphaned the rest of its processes: they name this
            # cluster's own (freshly made, unique) work directory on their command line
            killed += _kill_users_of(self.workdir)
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
            self._own_workdir = False
        return killed

    def __enter__(self) -> LocalCluster:
        if not self.address:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _stop_all(group: list[_Started], timeout_s: float) -> list[int]:
    """SIGTERM each ``ray start`` process, wait, then SIGKILL what is left of each family (the
    processes it had started, found before the SIGTERM, matched by pid and start time)."""
    families: list[list[psutil.Process]] = []
    for started in group:
        family: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(started.process.pid)
            family = [root, *root.children(recursive=True)]
        families.append(family)
        with contextlib.suppress(ProcessLookupError):
            started.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for started in group:
        with contextlib.suppress(subprocess.TimeoutExpired):
            started.process.wait(timeout=max(0.1, deadline - time.monotonic()))
    killed: list[int] = []
    for started, family in zip(group, families, strict=True):
        for proc in family:
            with contextlib.suppress(psutil.Error):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    proc.kill()
                    killed.append(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            started.process.wait(timeout=5)
        alive = [p for p in family if _running(p)]
        psutil.wait_procs(alive, timeout=5)
    return killed


def _kill_users_of(workdir: Path) -> list[int]:
    """SIGKILL the processes whose command line names ``workdir`` (unique to one cluster)."""
    marker = str(workdir)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if proc.pid != os.getpid() and any(marker in a for a in proc.info["cmdline"] or []):
                proc.kill()
                found.append(proc)
    psutil.wait_procs(found, timeout=5)
    return [p.pid for p in found]


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _free_port(host: str) -> int:
    return _free_ports(host, 1)[0]


def _free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct ports free now (all held open while picking)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent (this process) dies, so a killed
    ``hetsched ray local`` takes its ``ray start`` processes (and so Ray's) with it."""
    with contextlib.suppress(OSError, AttributeError):
        libc: Any = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
