"""A task as the Ray executor tracks it, and the small helpers around it: the header and
bases of its log files, appending its output to them, killing its actor, reading its exit,
shortening Ray's errors."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsched.agent.taskenv import exit_reason, job_folder, open_task_log, task_key, task_log
from hetsched.drivers.executor import Exit
from hetsched.keys import TaskKey

__all__ = [
    "RayStartError",
    "RayTaskHandle",
    "append_output",
    "kill_actor",
    "lost_reason",
    "read_bases",
    "reply_exit",
    "short",
    "size_of",
    "write_header",
]

log = logging.getLogger("hetsched.ray.executor")


class RayStartError(OSError):
    """Ray would not take the task (unknown node, a name already taken, no connection). An
    ``OSError`` so that a driver treats it like a process that could not be spawned."""


@dataclass(slots=True)
class RayTaskHandle:
    job_id: str
    task: int
    run: int
    #: the hetsched node and its Ray node id
    node: str
    node_id: str
    actor: Any
    #: on the node; 0 until the runner has said
    pid: int = 0
    pid_started: float = 0.0
    deadline: float | None = None
    kill_at: float | None = None
    #: when the actor is killed through Ray if the task has not ended by then
    force_at: float | None = None
    stopping: bool = False
    timed_out: bool = False
    killed_by_ray: bool = False
    #: bytes of this run's stdout and stderr received so far
    received: list[int] = field(default_factory=lambda: [0, 0])
    #: the outstanding long poll (an ObjectRef) and when to issue the next one
    call: Any = None
    next_call: float = 0.0
    #: lost with its node: when that was seen, and the exit waiting to be reported
    lost_at: float | None = None
    lost_exit: Exit | None = None

    @property
    def key(self) -> str:
        return task_key(self.job_id, self.task, self.run)

    def exit(self, code: int | None, reason: str) -> Exit:
        """Its exit with status ``code`` (None: unknown), stopped if it was asked to."""
        return Exit.of(self.job_id, self.task, self.run, code, self.stopping, reason)


def reply_exit(handle: RayTaskHandle, reply: dict[str, Any] | Any) -> Exit:
    """The exit a runner's final answer tells (an error, or the command's status)."""
    if reply["error"]:
        return handle.exit(None, str(reply["error"]))
    code = reply["exit"]
    reason = "exceeded its maximum runtime" if handle.timed_out else exit_reason(code)
    return handle.exit(code, reason)


def lost_reason(
    handle: RayTaskHandle, node: dict[str, Any] | None, exc: BaseException
) -> tuple[int | None, str, bool]:
    """Why a task's actor died without a word (``node``: its Ray node's entry, None when
    Ray no longer lists it): (exit status, reason, whether its node died)."""
    if handle.killed_by_ray:
        if handle.timed_out:
            return -signal.SIGKILL, "exceeded its maximum runtime", False
        why = "killed by signal 9 (its Ray actor was killed after the grace)"
        return -signal.SIGKILL, why, False
    if node is None or not node["Alive"]:
        message = str((node or {}).get("DeathReasonMessage") or "")
        return None, f"lost: node {handle.node} died" + (f" ({message})" if message else ""), True
    if handle.pid == 0:
        return None, f"cannot start on node {handle.node}: {short(exc)}", False
    return None, f"lost: its Ray actor on node {handle.node} died: {short(exc)}", False


def append_output(path: Path, data: bytes, key: str) -> None:
    """Append a task's output to its log through the local executor's opener (a task shares
    the machine with the control plane and can plant a link under its log's name). The task
    can also make that fail (a directory under the name, its job directory removed): its
    output is dropped then, and the other tasks' answers are still taken."""
    try:
        fd = open_task_log(path)
    except OSError as exc:
        log.warning("task %s: output dropped, its log cannot be opened: %s", key, exc)
        return
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def size_of(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def kill_actor(actor: Any) -> None:
    import ray

    with contextlib.suppress(Exception):
        ray.kill(actor, no_restart=True)


def short(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__


def _bases_path(home: Path, key: TaskKey) -> Path:
    """Where a run's output starts in its log files (survives a control-plane crash)."""
    return job_folder(home, key.job) / f"task-{key.task}.run-{key.run}.ray.json"


def write_header(home: Path, key: TaskKey, node: str, node_id: str) -> None:
    """Open a run's log files under ``home`` (a header line first) and record where its
    output starts in them, and its node."""
    job_folder(home, key.job).mkdir(parents=True, exist_ok=True, mode=0o700)
    header = f"--- hetsched: run {key.run} of task {key.task} on {node} ---\n".encode()
    bases = {}
    for stream in ("stdout", "stderr"):
        fd = open_task_log(task_log(home, key.job, key.task, stream))
        try:
            if stream == "stdout":
                os.write(fd, header)
            bases[stream] = os.fstat(fd).st_size
        finally:
            os.close(fd)
    path = _bases_path(home, key)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps({**bases, "node": node, "node_id": node_id}))
    partial.replace(path)


def read_bases(home: Path, key: TaskKey) -> dict[str, Any]:
    """What :func:`write_header` recorded of a run; empty when it cannot be read."""
    try:
        data: dict[str, Any] = json.loads(_bases_path(home, key).read_text())
    except (OSError, ValueError):
        return {}
    return data
