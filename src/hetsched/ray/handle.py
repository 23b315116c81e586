"""A task as the Ray executor tracks it, and the small helpers around it: the bases of its
log files (where its run's output starts in them), appending its output to them, the reason
for a task lost with its node, shortening Ray's errors."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsched.agent.taskenv import job_folder, open_task_log, task_key, task_log
from hetsched.drivers.executor import Exit
from hetsched.keys import TaskKey

__all__ = [
    "RayStartError",
    "RayTaskHandle",
    "append_output",
    "lost_reason",
    "read_bases",
    "short",
    "size_of",
    "write_bases",
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
    #: on the node; 0 until its agent has said
    pid: int = 0
    pid_started: float = 0.0
    stopping: bool = False
    #: in its notice until then (None: not in one)
    notice_until: float | None = None
    #: bytes of this run's stdout and stderr received so far
    received: list[int] = field(default_factory=lambda: [0, 0])
    #: lost with its node: when that was seen, and the exit waiting to be reported
    lost_at: float | None = None
    lost_exit: Exit | None = None

    @property
    def key(self) -> str:
        return task_key(self.job_id, self.task, self.run)

    def exit(self, code: int | None, reason: str) -> Exit:
        """Its exit with status ``code`` (None: unknown), stopped if it was asked to."""
        return Exit.of(self.job_id, self.task, self.run, code, self.stopping, reason)


def lost_reason(node_name: str, node: dict[str, Any] | None) -> str:
    """Why a task was lost with its node (``node``: its Ray node's entry, None when Ray no
    longer lists it)."""
    message = str((node or {}).get("DeathReasonMessage") or "")
    return f"lost: node {node_name} died" + (f" ({message})" if message else "")


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


def short(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__


def _bases_path(home: Path, key: TaskKey) -> Path:
    """Where a run's output starts in its log files (survives a control-plane crash)."""
    return job_folder(home, key.job) / f"task-{key.task}.run-{key.run}.ray.json"


def write_bases(home: Path, key: TaskKey, node: str, node_id: str) -> None:
    """Record where a run's output starts in its log files under ``home``, and its node."""
    job_folder(home, key.job).mkdir(parents=True, exist_ok=True, mode=0o700)
    bases = {s: size_of(task_log(home, key.job, key.task, s)) for s in ("stdout", "stderr")}
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
