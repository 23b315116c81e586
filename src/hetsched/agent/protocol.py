"""What a process executor offers a driver: the surface the local executor
(:class:`hetsched.agent.executor.Executor`) and the Ray executor
(:class:`hetsched.ray.executor.RayExecutor`) share, so that a driver written against it runs
tasks on either.

The meaning is the local executor's (its module says it in full): ``start`` spawns a task in
its own process group with its devices in its environment and raises ``OSError`` when it
cannot; ``stop`` sends SIGTERM to the group now and SIGKILL after the grace (with a notice,
where the executor gives one: ``notice_signal`` first, SIGTERM ``notice_s`` later); ``poll``
returns each ended task once, enforces maximum runtimes and escalates kills; ``shutdown``
forgets the tasks without stopping them; ``kill`` sends SIGKILL to a task's group at once,
by its key; after a control-plane crash ``find_leaders``, ``adopt`` and ``recorded_exit``
find tasks again and ``sweep`` kills those no live task accounts for.

A driver need not poll on a timer: ``on_exit`` is called when a task ends where the executor
can tell at once (``exits_reported``: the local executor, through a pidfd per process), and
``next_due`` says when ``poll`` has work of its own. The Ray executor learns of exits only by
polling, so a driver polls it while tasks run.

Where they differ (not part of this surface): the local executor can also kill a process
group by pid (``kill_now``, for the overcommit guard, which measures local processes); a pid
means nothing off its node, so the Ray executor has no such call. The Ray executor learns a
task's pid after ``start`` returns (0 until then), so a driver must find its tasks again by
key (``find_leaders``, ``adopt``) when no pid was recorded. Only the local executor runs a
task under a federation's lease (``fence``); the Ray executor refuses one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hetsched.agent.executor import RunAs, TaskExit
from hetsched.cluster.placement import Placement
from hetsched.model.device import Device

__all__ = ["ProcessExecutor", "TaskView"]


class TaskView(Protocol):
    """A running task as its executor tracks it."""

    @property
    def job_id(self) -> str: ...
    @property
    def task(self) -> int: ...
    @property
    def run(self) -> int: ...
    @property
    def pid(self) -> int: ...
    @property
    def pid_started(self) -> float: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def key(self) -> str: ...


class ProcessExecutor(Protocol):
    #: seconds between SIGTERM and SIGKILL when a task is stopped without its own grace
    kill_grace_s: float
    #: called (perhaps from another thread) when a task ends, where the executor can tell
    #: at once; the driver then polls without waiting for a timer
    on_exit: Callable[[], None] | None

    @property
    def exits_reported(self) -> bool:
        """Whether ``on_exit`` is called for every task that ends; if not, the driver must
        poll while tasks run."""
        ...

    def next_due(self) -> float | None:
        """The earliest time :meth:`poll` has work besides reporting exits (a SIGKILL after a
        grace, a maximum runtime, a retirement); None if nothing is due."""
        ...

    @property
    def home(self) -> Path: ...
    @property
    def instance(self) -> str: ...
    @property
    def handles(self) -> Mapping[str, TaskView]: ...

    def log_path(self, job_id: str, task: int, stream: str) -> Path: ...

    def start(
        self,
        job_id: str,
        task: int,
        run: int,
        placement: Placement,
        devices: Sequence[tuple[Device, int, int]],
        command: Sequence[str],
        env: Mapping[str, str],
        workdir: str | None,
        max_runtime_s: float | None,
        run_as: RunAs | None = None,
        fence: Path | None = None,
    ) -> TaskView: ...

    def adopt(
        self,
        job_id: str,
        task: int,
        run: int,
        pid: int,
        pid_started: float,
        deadline: float | None,
    ) -> TaskView | None: ...

    def recorded_exit(self, job_id: str, task: int, run: int) -> int | None: ...

    def find_leaders(self) -> dict[str, tuple[int, float]]: ...

    def sweep(self, live_keys: Iterable[str]) -> Sequence[int | str]: ...

    def stop(
        self,
        key: str,
        grace_s: float | None = None,
        now: float | None = None,
        notice_s: float = 0.0,
        notice_signal: str = "SIGUSR1",
    ) -> bool: ...

    def kill(self, key: str) -> bool: ...

    def poll(self, now: float | None = None) -> list[TaskExit]: ...

    def shutdown(self) -> None: ...


if TYPE_CHECKING:
    from hetsched.agent.executor import Executor

    def _local_executor_conforms(executor: Executor) -> ProcessExecutor:
        return executor
