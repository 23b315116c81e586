"""A new engine in one class: each task is a child process of the driver.

It implements the part of the executor protocol (hetsched.drivers.executor) that every
executor has: start, stop with a grace, exits by poll, shutdown. It offers no optional
capability (a restarted driver cannot adopt its tasks; there is no notice and no lease), so
a driver that tests for one with isinstance finds none.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hetsched.drivers import Exit, Launch, Start, Stop
from hetsched.keys import TaskKey


@dataclass
class _Task:
    popen: subprocess.Popen[bytes]
    stopping: bool = False
    #: when SIGKILL follows the SIGTERM already sent
    kill_at: float | None = None


@dataclass
class PopenExecutor:
    """Runs a task's ``Launch`` (from its Start, or ``launches`` by job id when the driver
    hands the interpreter's Starts over as they are) as a process in a session of its own."""

    launches: Mapping[str, Launch] = field(default_factory=dict)
    tasks: dict[TaskKey, _Task] = field(default_factory=dict)
    #: exits known without a process (a start that failed, a stop of no task): next poll
    known: list[Exit] = field(default_factory=list)

    def start(self, tasks: Sequence[Start], now: float) -> None:
        for start in tasks:
            launch = start.launch or self.launches.get(start.key.job)
            try:
                if launch is None:
                    raise OSError("no command to run")
                popen = subprocess.Popen(
                    launch.command,
                    env={**os.environ, **launch.env},
                    cwd=launch.workdir,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError as exc:
                self.known.append(Exit(start.key, False, f"cannot start: {exc}"))
                continue
            self.tasks[start.key] = _Task(popen)

    def stop(self, tasks: Sequence[Stop], now: float) -> None:
        for stop in tasks:
            task = self.tasks.get(stop.key)
            if task is None:
                self.known.append(Exit(stop.key, False, "not running", stopped=True))
                continue
            if not task.stopping:
                task.stopping = True
                os.killpg(task.popen.pid, signal.SIGTERM)
            deadline = now + stop.grace_s
            task.kill_at = deadline if task.kill_at is None else min(task.kill_at, deadline)

    def poll(self, now: float) -> list[Exit]:
        exits, self.known = self.known, []
        for key, task in list(self.tasks.items()):
            code = task.popen.poll()
            if code is None:
                if task.kill_at is not None and now >= task.kill_at:
                    os.killpg(task.popen.pid, signal.SIGKILL)
                continue
            del self.tasks[key]
            exits.append(Exit(key, code == 0, f"exit code {code}", code, task.stopping))
        return exits

    def shutdown(self) -> None:
        self.tasks.clear()  # forgotten, not stopped: nothing adopts them again
