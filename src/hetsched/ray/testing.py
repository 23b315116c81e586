"""Ray in tests: a local cluster in its own network and PID namespaces.

Ray binds the machine's own address unless it has no other, so a test cluster runs where
loopback is the only interface: ``unshare --net --pid --fork --mount-proc`` (as root, or
where user namespaces allow it). :class:`NamespacedCluster` starts such a namespace with a
:class:`~hetsched.ray.local.LocalCluster` inside and runs *test bodies* there, each in a
fresh Python process (its own Ray driver, which a body may kill):

```python
with NamespacedCluster("a100:2,t4:1", fake_devices=True) as cluster:
    result = cluster.run("bodies:placement", {"job": "j1"}, timeout_s=60)
    assert result.rc == 0, result.output
```

A body is a function ``fn(cluster: ClusterInfo, **args)`` importable from ``pythonpath``; what
it returns (JSON) comes back as ``result.value``; an exception makes ``rc`` non-zero with the
traceback in ``output``.

Contracts:
- Nothing leaves the namespace: the server inside refuses to start unless loopback is the
  only network interface, and it brings loopback up itself.
- Every wait is bounded; a body past its timeout is killed (its process group), and the
  namespace's init is killed with ``unshare`` (``--kill-child``), which ends every process
  in the namespace, so nothing outlives the :class:`NamespacedCluster`.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib
import json
import os
import queue
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = [
    "BodyResult",
    "ClusterInfo",
    "NamespacedCluster",
    "kill_raylet",
    "namespace_unavailable",
    "run_isolated",
]

_RESULT = "\x1ehetsched-body-result "
_CLUSTER_ENV = "HETSCHED_TEST_CLUSTER"
#: the command that makes the namespaces; --kill-child: killing unshare kills the namespace
_UNSHARE = ["unshare", "--net", "--pid", "--mount-proc", "--kill-child=SIGKILL"]


@functools.cache
def namespace_unavailable() -> str | None:
    """None when this machine can make network and PID namespaces (and Ray is installed);
    else why not, for a test's skip reason."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return "ray is not installed (pip install 'hetsched[ray]')"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    try:
        done = subprocess.run(
            [*_UNSHARE, "--", "true"], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit code {done.returncode}"
        return f"cannot make network and PID namespaces here: {why}"
    return None


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What a body knows of the cluster it runs against."""

    address: str
    #: hetsched node name -> Ray node id
    node_ids: dict[str, str]
    #: node name (``head`` included) -> pid of its ``ray start`` process
    pids: dict[str, int]
    #: a scratch directory for this body (inside the namespace's view of the filesystem)
    scratch: str
    #: the cluster's work directory (Ray's session, the fake device files ``devices-<node>.yaml``)
    workdir: str

    @classmethod
    def from_env(cls) -> ClusterInfo:
        return cls(**json.loads(os.environ[_CLUSTER_ENV]))


@dataclass(frozen=True, slots=True)
class BodyResult:
    rc: int
    output: str
    value: Any = None


def kill_raylet(info: ClusterInfo, node: str) -> int:
    """SIGKILL the raylet of ``node`` (from inside the namespace); returns its pid."""
    import psutil

    root = psutil.Process(info.pids[node])
    for child in root.children(recursive=True):
        if Path(child.exe()).name == "raylet":
            child.kill()
            return int(child.pid)
    raise LookupError(f"node {node} has no raylet running")


@dataclass
class NamespacedCluster:
    nodes: str
    fake_devices: bool = True
    #: where bodies are imported from (added to PYTHONPATH inside)
    pythonpath: Sequence[str] = ()
    start_timeout_s: float = 180.0
    address: str = ""
    node_ids: dict[str, str] = field(default_factory=dict)
    _process: subprocess.Popen[bytes] | None = None
    _replies: queue.Queue[bytes] = field(default_factory=queue.Queue)
    _log: Path | None = None
    _pump: threading.Thread | None = None

    def start(self) -> None:
        reason = namespace_unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        fd, log = tempfile.mkstemp(prefix="hetsched-ray-ns-", suffix=".log")
        self._log = Path(log)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [*self.pythonpath, *filter(None, [env.get("PYTHONPATH")])]
        )
        args = [sys.executable, "-m", "hetsched.ray.testing", "--nodes", self.nodes]
        if self.fake_devices:
            args.append("--fake-devices")
        # sh is the namespace's init: it reaps orphans (task supervisors) while it waits
        script = " ".join(_quote(a) for a in args) + "; exit $?"
        with os.fdopen(fd, "wb") as err:
            self._process = subprocess.Popen(
                [*_UNSHARE, "--", "/bin/sh", "-c", script],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
            )
        assert self._process.stdout is not None
        self._pump = threading.Thread(
            target=_pump, args=(self._process.stdout, self._replies), daemon=True
        )
        self._pump.start()
        hello = self._reply(self.start_timeout_s, "start the cluster")
        self.address = str(hello["address"])
        self.node_ids = dict(hello["node_ids"])

    def run(
        self, target: str, args: dict[str, Any] | None = None, timeout_s: float = 60.0
    ) -> BodyResult:
        """Run ``module:function`` in a fresh process inside the namespace."""
        request = {"op": "run", "target": target, "args": args or {}, "timeout": timeout_s}
        self._send(request)
        # the server kills the body at timeout_s; give it time to say so
        reply = self._reply(timeout_s + 30, f"run {target}")
        return BodyResult(int(reply["rc"]), str(reply["output"]), reply.get("value"))

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            self._send_to(process, {"op": "exit"})
            assert process.stdin is not None
            process.stdin.close()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            # the namespace's init dies with unshare, and everything in it with the init
            process.kill()
            process.wait(timeout=30)
        if self._pump is not None:
            self._pump.join(timeout=10)
        assert process.stdout is not None
        process.stdout.close()
        if self._log is not None:
            self._log.unlink(missing_ok=True)

    def _send(self, message: dict[str, Any]) -> None:
        if self._process is None:
            raise RuntimeError("the namespace is not running")
        self._send_to(self._process, message)

    @staticmethod
    def _send_to(process: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write(json.dumps(message).encode() + b"\n")
        process.stdin.flush()

    def _reply(self, timeout_s: float, what: str) -> dict[str, Any]:
        try:
            line = self._replies.get(timeout=timeout_s)
        except queue.Empty:
            log = self._log_tail()
            self.close()
            raise TimeoutError(f"{what}: no answer in {timeout_s:g} s\n{log}") from None
        if not line:
            log = self._log_tail()
            self.close()
            raise RuntimeError(f"{what}: the namespace ended\n{log}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{what}: {reply['error']}")
        return reply

    def _log_tail(self, limit: int = 6000) -> str:
        if self._log is None:
            return ""
        with contextlib.suppress(OSError):
            return self._log.read_text(errors="replace")[-limit:]
        return ""

    def __enter__(self) -> NamespacedCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_isolated(
    target: str,
    args: dict[str, Any] | None = None,
    timeout_s: float = 120.0,
    pythonpath: Sequence[str] = (),
) -> BodyResult:
    """Run ``module:function(**args)`` alone in fresh network and PID namespaces (loopback
    up, no cluster): for what starts its own, such as ``hetsched ray local``. Every process
    it leaves behind ends with the namespace."""
    reason = namespace_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    env = dict(os.environ)
    env.pop(_CLUSTER_ENV, None)
    env["PYTHONPATH"] = os.pathsep.join([*pythonpath, *filter(None, [env.get("PYTHONPATH")])])
    code = "from hetsched.ray.testing import _body_main; _body_main()"
    argv = [sys.executable, "-c", code, target, json.dumps(args or {})]
    script = " ".join(_quote(a) for a in argv) + "; exit $?"
    try:
        done = subprocess.run(
            [*_UNSHARE, "--", "/bin/sh", "-c", script],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(
            errors="replace"
        )
        return BodyResult(-signal.SIGKILL, output + f"\nkilled after {timeout_s:g} s\n")
    text = done.stdout.decode(errors="replace")
    value = None
    if _RESULT in text:
        text, _sep, raw = text.rpartition(_RESULT)
        value = json.loads(raw)
    return BodyResult(done.returncode, text + done.stderr.decode(errors="replace"), value)


def _pump(stream: IO[bytes], out: queue.Queue[bytes]) -> None:
    for line in stream:
        out.put(line)
    out.put(b"")


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


# -- inside the namespace ----------------------------------------------------------------


def _loopback_only() -> None:
    """Bring loopback up; refuse to go on where any other interface exists (not a fresh
    network namespace: Ray would bind and talk on the machine's own address)."""
    names = [name for _index, name in socket.if_nameindex()]
    if names != ["lo"]:
        raise RuntimeError(f"not in a fresh network namespace (interfaces: {names})")
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, siocgifflags, request)[:18])[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))


def _serve(nodes: str, fake_devices: bool) -> int:
    from hetsched.ray.local import LocalCluster, parse_nodes

    out = sys.stdout
    _loopback_only()
    scratch = Path(tempfile.mkdtemp(prefix="hetsched-bodies-"))
    cluster = LocalCluster(parse_nodes(nodes), fake_devices=fake_devices)
    try:
        cluster.start(progress=lambda line: print(line, file=sys.stderr, flush=True))
    except Exception as exc:
        out.write(json.dumps({"error": f"cannot start the cluster: {exc}"}) + "\n")
        out.flush()
        return 1
    info = ClusterInfo(
        cluster.address,
        dict(cluster.node_ids),
        cluster.pids(),
        str(scratch),
        str(cluster.workdir),
    )
    out.write(json.dumps(asdict(info)) + "\n")
    out.flush()
    try:
        for line in sys.stdin:
            request = json.loads(line)
            if request.get("op") == "exit":
                break
            reply = _run_body(info, request, scratch)
            out.write(json.dumps(reply) + "\n")
            out.flush()
    finally:
        cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _run_body(info: ClusterInfo, request: dict[str, Any], scratch: Path) -> dict[str, Any]:
    body_dir = Path(tempfile.mkdtemp(prefix="body-", dir=scratch))
    env = dict(os.environ)
    env[_CLUSTER_ENV] = json.dumps({**asdict(info), "scratch": str(body_dir)})
    env["RAY_ADDRESS"] = info.address
    log = body_dir / "output.log"
    code = "from hetsched.ray.testing import _body_main; _body_main()"
    with log.open("wb") as sink:
        body = subprocess.Popen(
            [sys.executable, "-c", code, request["target"], json.dumps(request["args"])],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            rc = body.wait(timeout=float(request["timeout"]))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(body.pid, signal.SIGKILL)
            body.wait(timeout=30)
            rc = -signal.SIGKILL
            with log.open("ab") as note:
                note.write(f"\nkilled after {request['timeout']} s\n".encode())
    # whatever the body left in its session (a task it started by hand) goes with it
    with contextlib.suppress(ProcessLookupError):
        os.killpg(body.pid, signal.SIGKILL)
    text = log.read_text(errors="replace")
    value = None
    if _RESULT in text:
        text, _sep, raw = text.rpartition(_RESULT)
        value = json.loads(raw)
    return {"rc": rc, "output": text[-20000:], "value": value}


def _body_main() -> None:
    """Run one body: with the cluster's description as its first argument when it runs
    against a cluster, alone in a fresh namespace otherwise (:func:`run_isolated`)."""
    target, raw_args = sys.argv[1], sys.argv[2]
    module_name, _sep, function_name = target.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
        if _CLUSTER_ENV in os.environ:
            value = function(ClusterInfo.from_env(), **json.loads(raw_args))
        else:
            _loopback_only()
            value = function(**json.loads(raw_args))
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.stdout.write(_RESULT + json.dumps(value) + "\n")
    sys.stdout.flush()
    # leave at once: a body's Ray driver may take seconds to shut down
    os._exit(0)


def _main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m hetsched.ray.testing")
    parser.add_argument("--nodes", required=True)
    parser.add_argument("--fake-devices", action="store_true")
    options = parser.parse_args(argv)
    return _serve(options.nodes, options.fake_devices)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
