"""The local process executor: runs bound tasks as real processes, one process group each.

It implements the executor protocol (:mod:`hetsched.drivers.executor`) with every process
capability: :class:`~hetsched.drivers.executor.Polled` (a pidfd per process wakes the
driver), :class:`~hetsched.drivers.executor.Adopts`,
:class:`~hetsched.drivers.executor.Fences`, :class:`~hetsched.drivers.executor.GivesNotice`,
:class:`~hetsched.drivers.executor.KillsByPid` and
:class:`~hetsched.drivers.executor.ProcessTasks`.

Contracts:
- Each task runs in its own session (so its own process group) under a small ``/bin/sh``
  wrapper (``agent/wrapper.py``) that writes the command's exit code to ``<exit file>``
  when it ends. That file is how an exit code survives a control-plane crash: a restarted
  service adopts a process that is still alive (same pid *and* same start time), and
  learns the exit code of one that ended while nobody was watching from the file.
- Stopping a task is SIGTERM to the whole group, then SIGKILL to the group after the grace
  period; with a notice, the notice signal first and SIGTERM ``notice_s`` later. When a
  task's main process ends, whatever is left in its group is killed, so nothing outlives
  the allocation.
- Every process carries ``HETSCHED_INSTANCE`` and ``HETSCHED_TASK_KEY`` in its environment,
  so :meth:`Executor.sweep` can find and kill processes that no live task record accounts
  for (a crash between spawning and recording the pid).
- A task that cannot be spawned, and a stop of a task that is not running, are reported by
  the next :meth:`Executor.poll` (``next_due`` says so at once).
- The executor is driven by one thread (the reconcile loop); it is not thread-safe.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from hetsched.agent.exits import ExitWatcher
from hetsched.agent.logcap import LogCap
from hetsched.agent.taskenv import (
    device_env,
    exit_reason,
    identity_env,
    job_folder,
    local_indices,
    open_task_log,
    task_key,
    task_log,
)
from hetsched.agent.wrapper import (
    FENCED_EXIT,
    adoptable,
    disk_fault,
    find_leaders,
    forget_exit,
    forget_journal,
    home_of,
    journal_exit,
    journaled_exit,
    never_ran,
    not_started,
    read_exit,
    running,
    signal_group,
    sweep,
    sync_files,
    wrapper_argv,
)
from hetsched.cluster.placement import Placement
from hetsched.drivers.executor import Exit, Launch, RunAs, Start, Stop

if TYPE_CHECKING:
    from hetsched.drivers import executor as protocol
from hetsched.keys import TaskKey
from hetsched.model.device import Device

__all__ = [
    "FENCED_EXIT",
    "Executor",
    "RunAs",
    "TaskHandle",
    "device_env",
    "identity_env",
    "job_folder",
    "local_indices",
    "open_task_log",
    "task_key",
    "task_log",
]


@dataclass(slots=True)
class TaskHandle:
    job_id: str
    task: int
    run: int
    pid: int
    pid_started: float
    exit_file: Path
    popen: subprocess.Popen[bytes] | None = None
    #: an adopted process (no popen), by its identity since boot: unlike the wall-clock
    #: start time, that does not move when the clock does
    process: psutil.Process | None = None
    #: when the task must end (its maximum runtime), or None
    deadline: float | None = None
    #: when SIGKILL follows the SIGTERM already sent, or None
    kill_at: float | None = None
    #: in its notice: when SIGTERM follows the notice signal already sent, and the grace
    #: between SIGTERM and SIGKILL then
    term_at: float | None = None
    grace_s: float = 0.0
    #: the core asked for this task to stop (Kill or Preempt)
    stopping: bool = False
    timed_out: bool = False

    @property
    def key(self) -> str:
        return task_key(self.job_id, self.task, self.run)


@dataclass(slots=True)
class Executor:
    home: Path
    #: marks this service's processes (see sweep)
    instance: str
    kill_grace_s: float = 5.0
    handles: dict[str, TaskHandle] = field(default_factory=dict)
    #: seconds after a fenced task's lease expiry at which its own watchdog kills it
    fence_backstop_s: int = 7
    #: called (from another thread) as soon as a started or adopted process ends, so the
    #: driver can :meth:`poll` at once instead of on a timer (see agent/exits.py)
    on_exit: Callable[[], None] | None = None
    _exits: ExitWatcher | None = field(default=None, repr=False)
    #: exits known without a process: starts that failed, stops of tasks not running
    _known: list[Exit] = field(default_factory=list, repr=False)
    #: running tasks' logs kept under a size cap (agent/logcap.py; no cap by default)
    logs: LogCap = field(default_factory=lambda: LogCap(None), repr=False)

    @property
    def exits_reported(self) -> bool:
        """Whether ``on_exit`` is called for every process that ends (pidfds work here);
        if not, the driver must poll while tasks run."""
        return self.on_exit is not None and self._watcher() is not None

    def _watcher(self) -> ExitWatcher | None:
        if self.on_exit is None:
            return None
        if self._exits is None:
            self._exits = ExitWatcher(self.on_exit)
        return self._exits if self._exits.supported else None

    def _watch(self, pid: int) -> None:
        watcher = self._watcher()
        if watcher is not None:
            watcher.watch(pid)

    def next_due(self) -> float | None:
        """The earliest time :meth:`poll` has something to do besides reporting exits: an
        exit it knows of already (at once), a SIGTERM at the end of a notice, a SIGKILL
        after a grace period, a maximum runtime reached; None if nothing is due."""
        times = [time.time()] if self._known else []
        times += [t for t in [self.logs.due(bool(self.handles))] if t is not None]
        times += [h.kill_at for h in self.handles.values() if h.kill_at is not None]
        times += [h.term_at for h in self.handles.values() if h.term_at is not None]
        times += [
            h.deadline
            for h in self.handles.values()
            if h.deadline is not None and not (h.stopping or h.timed_out)
        ]
        return min(times) if times else None

    def job_dir(self, job_id: str) -> Path:
        return job_folder(self.home, job_id)

    def log_path(self, job_id: str, task: int, stream: str) -> Path:
        return task_log(self.home, job_id, task, stream)

    def exit_file(self, job_id: str, task: int, run: int) -> Path:
        return self.job_dir(job_id) / f"task-{task}.run-{run}.exit"

    # -- start ---------------------------------------------------------------------------

    def start(self, tasks: Sequence[Start], now: float) -> None:
        """Spawn each task's process (its :class:`Launch` says what it runs). With a
        ``fence`` (a federation's lease file) a task runs only while that lease is live.
        One that cannot be spawned is reported by the next poll (``cannot start: ...``)."""
        for start in tasks:
            key = start.key
            try:
                if start.launch is None:
                    raise OSError("no command to run")
                self.spawn(key, start.placement, start.launch)
            except OSError as exc:
                # a full or read-only disk is the node's fault: the run waits and is tried
                # again (not_started), no failure counted against the job
                waits = disk_fault(exc)
                reason = f"cannot start: {exc}" + ("; the node's disk: it waits" if waits else "")
                exit_ = Exit.of(key.job, key.task, key.run, None, False, reason, waits)
                self._known.append(exit_)

    def spawn(self, key: TaskKey, placement: Placement, launch: Launch) -> TaskHandle:
        """Spawn one task's process; raises OSError if it cannot be started."""
        job_id, task, run = key
        directory = self.job_dir(job_id)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        exit_file = self.exit_file(job_id, task, run)
        exit_file.unlink(missing_ok=True)
        forget_exit(self.instance, str(key))
        full_env = self._task_env(key, placement.node, launch.devices, launch.env)
        cwd = launch.workdir or str(directory)
        if launch.run_as is not None and launch.workdir is None:
            # the home is private to the service: start in the account's own home
            cwd = home_of(launch.run_as.uid)
        wrapper = wrapper_argv(launch.fence, self.fence_backstop_s)
        header = f"--- hetsched: run {run} of task {task} on {placement.node} ---\n".encode()
        argv = [*wrapper, *launch.command]
        popen = self._spawn(job_id, task, exit_file, header, argv, cwd, full_env, launch.run_as)
        try:
            started = psutil.Process(popen.pid).create_time()
        except psutil.Error:
            started = time.time()
        max_runtime_s = launch.max_runtime_s
        deadline = time.time() + max_runtime_s if max_runtime_s else None
        handle = TaskHandle(
            job_id, task, run, popen.pid, started, exit_file, popen=popen, deadline=deadline
        )
        self.handles[handle.key] = handle
        self._watch(popen.pid)
        return handle

    def _task_env(
        self,
        key: TaskKey,
        node: str,
        devices: Sequence[tuple[Device, int, int]],
        env: Mapping[str, str],
    ) -> dict[str, str]:
        """The task's environment: the service's own, less its ``HETSCHED_*`` variables (the
        token), then the job's, its devices', and the task's identity."""
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("HETSCHED_")}
        full_env.update(env)
        full_env.update(device_env(devices))
        full_env.update(identity_env(key.job, key.task, key.run, node, self.instance))
        return full_env

    def _spawn(
        self,
        job_id: str,
        task: int,
        exit_file: Path,
        header: bytes,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        run_as: RunAs | None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in a session of its own, its output appended to the task's logs
        (after ``header``) and the exit file as the wrapper's stdin."""
        out_fd = open_task_log(self.log_path(job_id, task, "stdout"))
        err_fd = open_task_log(self.log_path(job_id, task, "stderr"))
        exit_fd = os.open(exit_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(out_fd, header)
            return subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=exit_fd,
                stdout=out_fd,
                stderr=err_fd,
                start_new_session=True,
                close_fds=True,
                user=run_as.uid if run_as else None,
                group=run_as.gid if run_as else None,
                extra_groups=[] if run_as else None,
            )
        finally:
            os.close(out_fd)
            os.close(err_fd)
            os.close(exit_fd)

    # -- adopt after a restart -----------------------------------------------------------

    def adopt(
        self,
        job_id: str,
        task: int,
        run: int,
        pid: int,
        pid_started: float,
        deadline: float | None,
    ) -> TaskHandle | None:
        """Watch a process started by an earlier incarnation, if it is that process still."""
        process = adoptable(pid, pid_started)
        if process is None:
            return None
        handle = TaskHandle(job_id, task, run, pid, pid_started, self.exit_file(job_id, task, run))
        handle.deadline = deadline
        handle.process = process
        self.handles[handle.key] = handle
        self._watch(pid)
        return handle

    def recorded_exit(self, job_id: str, task: int, run: int) -> int | None:
        """The exit code the wrapper wrote, if the task ended while nobody watched (or the
        one kept in the journal where the exit file's disk refused it)."""
        code = read_exit(self.exit_file(job_id, task, run))
        return (
            code if code is not None else journaled_exit(self.instance, task_key(job_id, task, run))
        )

    def never_ran(self, job_id: str, task: int, run: int) -> bool:
        """Whether no wrapper started the task's command (see :func:`never_ran`)."""
        return never_ran(self.exit_file(job_id, task, run))

    def find_leaders(self) -> dict[str, tuple[int, float]]:
        """Task key -> (pid, start time) of each live task wrapper of this instance: the
        session leader carrying the key. Finds tasks whose pid was never recorded."""
        return find_leaders(self.instance)

    def sweep(self, live_keys: Iterable[str]) -> list[int]:
        """Kill process groups of this instance that no live task accounts for."""
        return sweep(self.instance, live_keys)

    # -- stop ----------------------------------------------------------------------------

    def stop(self, tasks: Sequence[Stop], now: float) -> None:
        """SIGTERM each task's group and SIGKILL it after the grace period. With
        ``notice_s`` the group first gets ``notice_signal`` and SIGTERM follows that much
        later (a task that checkpoints then exits sooner). A second stop shortens a notice
        in progress (``notice_s`` 0: SIGTERM now), never lengthens it. A task not running
        here is reported stopped by the next poll."""
        for stop in tasks:
            key = stop.key
            if not self.stop_one(str(key), stop.grace_s, now, stop.notice_s, stop.notice_signal):
                reason = "stopped before it ran"
                self._known.append(Exit.of(key.job, key.task, key.run, None, True, reason))

    def stop_one(
        self,
        key: str,
        grace_s: float | None = None,
        now: float | None = None,
        notice_s: float = 0.0,
        notice_signal: str = "SIGUSR1",
    ) -> bool:
        """Stop one task (as :meth:`stop`; ``grace_s`` None: ``kill_grace_s``); False when
        no such task is watched."""
        handle = self.handles.get(key)
        if handle is None:
            return False
        now = time.time() if now is None else now
        grace = self.kill_grace_s if grace_s is None else grace_s
        first = not handle.stopping
        handle.stopping = True
        if notice_s > 0 and first and handle.kill_at is None:
            signal_group(handle.pid, signal.Signals[notice_signal])
            handle.term_at = now + notice_s
            handle.grace_s = grace
        elif handle.term_at is not None and notice_s > 0:
            handle.term_at = min(handle.term_at, now + notice_s)
        else:
            handle.term_at = None
            self._terminate(handle, grace, now)
        return True

    def in_notice(self, key: TaskKey) -> bool:
        handle = self.handles.get(str(key))
        return handle is not None and handle.term_at is not None

    def _terminate(self, handle: TaskHandle, grace_s: float | None, now: float | None) -> None:
        now = time.time() if now is None else now
        grace = self.kill_grace_s if grace_s is None else grace_s
        if handle.kill_at is None:
            signal_group(handle.pid, signal.SIGTERM)
            handle.kill_at = now + grace
        else:
            handle.kill_at = min(handle.kill_at, now + grace)

    def kill(self, key: str) -> bool:
        """SIGKILL the task's group now; its exit comes from a later :meth:`poll`. False
        when no such task is watched."""
        handle = self.handles.get(key)
        if handle is None:
            return False
        signal_group(handle.pid, signal.SIGKILL)
        return True

    def kill_pid(self, pid: int) -> None:
        signal_group(pid, signal.SIGKILL)

    # -- watch ---------------------------------------------------------------------------

    def poll(self, now: float | None = None) -> list[Exit]:
        """Tasks whose main process ended since the last poll (and the exits known without
        one); escalates pending kills and enforces maximum runtimes."""
        now = time.time() if now is None else now
        exits, self._known = self._known, []
        self.logs.check([p for h in self.handles.values() for p in self._logs_of(h)], now)
        for key, handle in list(self.handles.items()):
            code = self._ended(handle)
            if code is None:
                self._escalate(handle, now)
                continue
            del self.handles[key]
            # nothing of the task may outlive it: kill what is left of its group
            signal_group(handle.pid, signal.SIGKILL)
            exits.append(self._exit(handle, code[0]))
        return exits

    def _logs_of(self, handle: TaskHandle) -> tuple[Path, Path]:
        job_id, task = handle.job_id, handle.task
        return self.log_path(job_id, task, "stdout"), self.log_path(job_id, task, "stderr")

    def _escalate(self, handle: TaskHandle, now: float) -> None:
        """A running task's due step: SIGTERM after its notice, SIGKILL after its grace, or
        SIGTERM at its maximum runtime."""
        if handle.term_at is not None and now >= handle.term_at:
            handle.term_at = None  # the notice is over
            self._terminate(handle, handle.grace_s, now)
        elif handle.kill_at is not None and now >= handle.kill_at:
            signal_group(handle.pid, signal.SIGKILL)
            # again in a second while the group lingers, not at every poll
            handle.kill_at = now + 1.0
        elif (
            handle.deadline is not None
            and now >= handle.deadline
            and not (handle.stopping or handle.timed_out)
        ):
            handle.timed_out = True
            self._terminate(handle, None, now)

    def _exit(self, handle: TaskHandle, code: int | None) -> Exit:
        job_id, task = handle.job_id, handle.task
        sync_files(handle.exit_file, *self._logs_of(handle))
        recorded = read_exit(handle.exit_file)
        exit_code = recorded if recorded is not None else code
        fenced = not_started(handle.exit_file)
        if fenced:
            reason = "not started: its federation's lease had expired"
        elif handle.timed_out:
            reason = "exceeded its maximum runtime"
        else:
            reason = exit_reason(exit_code)
        return Exit.of(job_id, task, handle.run, exit_code, handle.stopping, reason, fenced)

    def _ended(self, handle: TaskHandle) -> tuple[int | None] | None:
        """None while running; else a 1-tuple with the return code when known."""
        if handle.popen is not None:
            code = handle.popen.poll()
            return None if code is None else (code,)
        return None if handle.process is not None and running(handle.process) else (None,)

    def forget_journal(self) -> None:
        forget_journal(self.instance)

    def keep_exits(self, exits: Sequence[Exit]) -> None:
        for exit_ in exits:
            if exit_.code is not None:
                journal_exit(self.instance, str(exit_.key), exit_.code)

    def shutdown(self) -> None:
        """Forget the processes without stopping them: a restart adopts them again."""
        if self._exits is not None:
            self._exits.close()
            self._exits = None
        for handle in self.handles.values():
            if handle.popen is not None:
                # Popen would otherwise warn that the child is still running
                handle.popen.returncode = 0
        self.handles.clear()
        self._known.clear()


if TYPE_CHECKING:
    # mypy checks that the local executor has the protocol and every capability it claims
    def _conforms(executor: Executor) -> tuple[protocol.ProcessExecutor, protocol.Fences]:
        return executor, executor

    def _capable(executor: Executor) -> tuple[protocol.GivesNotice, protocol.KillsByPid]:
        return executor, executor

    def _keeps(executor: Executor) -> protocol.KeepsExits:
        return executor
