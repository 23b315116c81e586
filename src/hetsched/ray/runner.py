"""The task runner: one hetsched task on a Ray node, as a Ray actor (one per task).

The control plane (:mod:`hetsched.ray.executor`) creates a :class:`TaskRunner` as a named,
detached actor pinned to the task's node. Its constructor starts the task's process under the
supervisor (:mod:`hetsched.ray._supervise`) and returns; its methods report and signal:

- :meth:`sync` is a long poll: it answers when the task wrote output, ended, or ``wait_s``
  passed, with the output past the offsets it was given. The exit comes only once every byte
  before it has been handed out, so a reader that follows the offsets has all the output when
  it learns the exit.
- :meth:`signal` sends a signal to the task's process group.
- :meth:`retire` removes the task's files on the node and lets the task's group die (the
  executor calls it once the exit is recorded, then kills the actor).

Nothing of the task outlives the actor: the supervisor kills the group when the actor's end of
the guard pipe closes (the actor exits, is killed, or its node's raylet dies).

The task's environment is the node's (the raylet's own environment, which Ray's workers
inherit plus variables of Ray's own), less every ``HETSCHED_*`` variable, plus what the
control plane sends: the job's variables, the device variables and ``HETSCHED_*``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal as signals
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

__all__ = ["SUPERVISOR", "TaskRunner", "node_environment"]

SUPERVISOR = str(Path(__file__).with_name("_supervise.py"))
#: variables Ray sets for its worker processes that say nothing about the node
_RAY_WORKER_VARIABLES = frozenset(
    {
        "RAY_JOB_ID",
        "RAY_RAYLET_PID",
        "RAY_CLIENT_MODE",
        "RAY_LD_PRELOAD_ON_WORKERS",
        "PYTHONBREAKPOINT",
        "SPT_NOENV",
    }
)


def node_environment() -> dict[str, str]:
    """The node's environment: the raylet's when it can be read, else this worker's less the
    variables Ray sets for its workers."""
    raylet = os.environ.get("RAY_RAYLET_PID", "")
    if raylet.isdigit():
        with contextlib.suppress(OSError):
            raw = Path(f"/proc/{raylet}/environ").read_bytes()
            pairs = (item.partition(b"=") for item in raw.split(b"\0") if b"=" in item)
            return {k.decode(errors="replace"): v.decode(errors="replace") for k, _s, v in pairs}
    return {k: v for k, v in os.environ.items() if k not in _RAY_WORKER_VARIABLES}


class TaskRunner:
    """One task's process on this node. ``spec`` (plain data from the control plane):
    ``key``, ``job_id``, ``task``, ``run``, ``node`` (the hetsched node), ``command``,
    ``env`` (added to the node's), ``workdir`` (None: the task's directory on the node),
    ``node_dir`` (where task files go on the node), ``run_as`` ([uid, gid] or None)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.pid = 0
        self.pid_started = 0.0
        self.code: int | None = None
        self.error = ""
        self.killed = False
        self._ended = threading.Event()
        self._started = threading.Event()
        directory = Path(spec["node_dir"]) / "jobs" / str(spec["job_id"])
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        stem = f"task-{spec['task']}.run-{spec['run']}"
        self.paths = {"out": directory / f"{stem}.out", "err": directory / f"{stem}.err"}
        self._guard = -1
        status = self._spawn(directory)
        if status is not None:
            threading.Thread(target=self._follow, args=(status,), daemon=True).start()
            # the supervisor says its pid within milliseconds; never wait long for it
            self._started.wait(timeout=10)
        else:
            self._ended.set()

    # -- start ------------------------------------------------------------------------------

    def _spawn(self, directory: Path) -> int | None:
        """Start the supervisor; the read end of its status pipe, or None if it could not."""
        spec = self.spec
        env = {k: v for k, v in node_environment().items() if not k.startswith("HETSCHED_")}
        env.update({str(k): str(v) for k, v in spec["env"].items()})
        run_as = spec.get("run_as")
        cwd = spec.get("workdir") or str(directory)
        if run_as is not None and not spec.get("workdir"):
            cwd = _home_of(int(run_as[0]))
        guard_read, guard_write = os.pipe()
        status_read, status_write = os.pipe()
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        try:
            out = os.open(self.paths["out"], flags, 0o600)
            err = os.open(self.paths["err"], flags, 0o600)
        except OSError as exc:
            for fd in (guard_read, guard_write, status_read, status_write):
                os.close(fd)
            self.error = f"cannot start: {exc}"
            return None
        try:
            launcher = subprocess.Popen(
                [sys.executable, "-I", SUPERVISOR, str(guard_read), str(status_write), "--"]
                + [str(a) for a in spec["command"]],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=cwd,
                env=env,
                pass_fds=(guard_read, status_write),
                user=int(run_as[0]) if run_as else None,
                group=int(run_as[1]) if run_as else None,
                extra_groups=[] if run_as else None,
            )
            # it forks the supervisor and exits at once
            if launcher.wait(timeout=30) != 0:
                raise OSError(f"the task supervisor exited with {launcher.returncode}")
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(guard_write)
            os.close(status_read)
            self.error = f"cannot start: {exc}"
            return None
        finally:
            for fd in (guard_read, status_write, out, err):
                os.close(fd)
        # kept open for the actor's lifetime: its end-of-file tells the supervisor we are gone
        self._guard = guard_write
        return status_read

    def _follow(self, status: int) -> None:
        with os.fdopen(status, "rb") as lines:
            for raw in lines:
                word, _sep, value = raw.decode(errors="replace").strip().partition(" ")
                if word == "pid" and value.isdigit():
                    self.pid = int(value)
                    with contextlib.suppress(psutil.Error):
                        self.pid_started = psutil.Process(self.pid).create_time()
                    self._started.set()
                elif word == "exit":
                    with contextlib.suppress(ValueError):
                        self.code = int(value)
        if self.code is None and self.killed:
            # the supervisor itself died of the SIGKILL sent to the group
            self.code = -signals.SIGKILL
        self._started.set()
        self._ended.set()

    # -- the actor's methods ------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        ended = self._ended.is_set()
        return {
            "key": self.spec["key"],
            "node": self.spec["node"],
            "pid": self.pid,
            "pid_started": self.pid_started,
            "ended": ended,
            "exit": self.code if ended else None,
            "error": self.error,
        }

    def ray_view(self) -> dict[str, Any]:
        """Where Ray says this actor runs and what it gave it: the node id, the resources
        assigned (none: hetsched asked for none) and the GPU ids Ray picked (none)."""
        import ray

        context = ray.get_runtime_context()
        return {
            "node_id": context.get_node_id(),
            "assigned": dict(context.get_assigned_resources()),  # type: ignore[no-untyped-call]
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "worker_pid": os.getpid(),
        }

    def signal(self, signum: int) -> bool:
        """Send ``signum`` to the task's process group; False once it has ended."""
        if self.pid <= 0 or self._ended.is_set():
            return False
        if signum == signals.SIGKILL:
            self.killed = True
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def sync(
        self, out_offset: int, err_offset: int, wait_s: float, limit: int, pid_known: bool = True
    ) -> dict[str, Any]:
        """Output past the offsets (at most ``limit`` bytes per stream), once there is some,
        or the task ended, or ``wait_s`` passed, or at once for a caller that does not know
        the pid yet. ``ended`` (with ``exit``) only once all the output has been handed out."""
        deadline = time.monotonic() + wait_s
        while True:
            ended = self._ended.is_set()
            if ended or self._size("out") > out_offset or self._size("err") > err_offset:
                break
            if not pid_known and self.pid:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._ended.wait(min(0.1, left))
        out = self._read("out", out_offset, limit)
        err = self._read("err", err_offset, limit)
        drained = (
            ended
            and out_offset + len(out) >= self._size("out")
            and err_offset + len(err) >= self._size("err")
        )
        reply = self.status()
        reply.update(out=out, err=err, ended=drained, exit=self.code if drained else None)
        return reply

    def retire(self) -> None:
        """Remove the task's files on the node and let whatever is left of it die."""
        for path in self.paths.values():
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.paths["out"].parent.rmdir()
        if self._guard >= 0:
            os.close(self._guard)
            self._guard = -1

    # -- files ------------------------------------------------------------------------------

    def _size(self, stream: str) -> int:
        try:
            return self.paths[stream].stat().st_size
        except OSError:
            return 0

    def _read(self, stream: str, offset: int, limit: int) -> bytes:
        try:
            with self.paths[stream].open("rb") as handle:
                handle.seek(offset)
                return handle.read(limit)
        except OSError:
            return b""


def _home_of(uid: int) -> str:
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        return "/"
    return home if os.path.isdir(home) else "/"
