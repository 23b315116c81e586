"""The process executor: runs bound tasks as real processes, one process group each.

Contracts:
- Each task runs in its own session (so its own process group) under a small ``/bin/sh``
  wrapper that writes the command's exit code to ``<exit file>`` when it ends. That file
  is how an exit code survives a control-plane crash: a restarted service adopts a process
  that is still alive (same pid *and* same start time), and learns the exit code of one
  that ended while nobody was watching from the file.
- Stopping a task is SIGTERM to the whole group, then SIGKILL to the group after the grace
  period. When a task's main process ends, whatever is left in its group is killed, so
  nothing outlives the allocation.
- Every process carries ``HETSCHED_INSTANCE`` and ``HETSCHED_TASK_KEY`` in its environment,
  so :meth:`Executor.sweep` can find and kill processes that no live task record accounts
  for (a crash between spawning and recording the pid).
- The executor is driven by one thread (the reconcile loop); it is not thread-safe.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from hetsched.agent.exits import ExitWatcher
from hetsched.cluster.placement import Placement
from hetsched.keys import TaskKey
from hetsched.model.device import Device

__all__ = [
    "FENCED_EXIT",
    "Executor",
    "RunAs",
    "TaskExit",
    "TaskHandle",
    "device_env",
    "identity_env",
    "job_folder",
    "local_indices",
    "open_task_log",
    "task_key",
    "task_log",
]

#: the notice signals (model/checkpoint.py): a notice goes to the task's whole group, so
#: the wrapper and a fenced task's watchdog survive them
_NOTICES = "INT HUP USR1 USR2 QUIT ALRM"
#: the signals the wrapper survives: SIGTERM and every notice signal
_TRAPPED = f"TERM {_NOTICES}"
#: The wrapper survives the group's SIGTERM (a trap, not an ignore, so the command keeps the
#: default disposition) and waits for the command, so a command that takes its grace period
#: gets all of it and its exit status is recorded; SIGKILL of the group ends both. The exit
#: file is opened by the service and handed over as the wrapper's stdin (written with
#: ``>&0``; the command gets /dev/null), so a job running as another OS user needs no access
#: to the service's home.
_WRAPPER = f'trap : {_TRAPPED}; "$@" </dev/null; c=$?; echo "$c" >&0; exit "$c"'
#: The wrapper of a task fenced by a federation's lease (``service/fencing.py``): ``$1`` is
#: the lease file, whose first line is the expiry in whole wall-clock seconds, ``$2`` the
#: backstop. It never starts the command at or after the expiry (exit 125), and a watchdog
#: in the task's group kills the whole group once ``expiry + backstop`` has passed, whether
#: or not the service is alive to do it. A command it did not start leaves ``fenced`` in the
#: exit file (not a number: a command's own 125 must not read as one it never ran).
#: The watchdog outlives a notice (a ``sleep`` the notice ends only shortens one wait) and
#: ends with the group's SIGTERM or the wrapper's.
_FENCED_WRAPPER = (
    f"trap : {_TRAPPED}; f=$1; b=$2; shift 2; "
    'x() { e=0; read -r e < "$f" 2>/dev/null; [ "$(date +%s)" -ge "$((e + $1))" ]; }; '
    'if x 0; then echo "hetsched: fenced: the lease in $f has expired" >&2; '
    "echo fenced >&0; exit 125; fi; "
    f'( trap : {_NOTICES}; while :; do sleep 1; if x "$b"; then '
    'echo "hetsched: fenced: the lease in $f expired; stopping the task" >&2; '
    "kill -KILL 0; fi; done ) </dev/null & w=$!; "
    '"$@" </dev/null; c=$?; kill "$w" 2>/dev/null; echo "$c" >&0; exit "$c"'
)
#: the exit status of a fenced task that was not started (its lease had expired)
FENCED_EXIT = 125
#: what the fenced wrapper writes to the exit file when it did not start the command
_NOT_STARTED = "fenced"
#: how closely a recorded start time must match a live process's to adopt it (seconds)
_START_TOLERANCE_S = 0.05


def task_key(job_id: str, task: int, run: int) -> str:
    """The executor's key of a task: the string form of its TaskKey (what its process
    carries in ``HETSCHED_TASK_KEY``)."""
    return str(TaskKey(job_id, task, run))


def job_folder(home: Path, job_id: str) -> Path:
    """A job's folder under an executor's home: its tasks' logs and exit files."""
    return home / "jobs" / job_id


def task_log(home: Path, job_id: str, task: int, stream: str) -> Path:
    """A task's log of ``stream`` (stdout or stderr), which every run of the task appends
    to: the layout both executors write (the Ray executor streams its tasks' output here)
    and the service reads."""
    return job_folder(home, job_id) / f"task-{task}.{'err' if stream == 'stderr' else 'out'}"


def identity_env(job_id: str, task: int, run: int, node: str, instance: str) -> dict[str, str]:
    """What a task learns of itself from its environment, whichever executor starts it
    (``HETSCHED_TASK_KEY`` is what its reports to the service name it by)."""
    return {
        "HETSCHED_JOB_ID": job_id,
        "HETSCHED_TASK_INDEX": str(task),
        "HETSCHED_RUN": str(run),
        "HETSCHED_NODE": node,
        "HETSCHED_TASK_KEY": task_key(job_id, task, run),
        "HETSCHED_INSTANCE": instance,
    }


@dataclass(slots=True)
class TaskHandle:
    job_id: str
    task: int
    run: int
    pid: int
    pid_started: float
    exit_file: Path
    popen: subprocess.Popen[bytes] | None = None
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


@dataclass(frozen=True, slots=True)
class TaskExit:
    """A task's main process ended. ``exit_code`` is None when it is unknown (lost)."""

    job_id: str
    task: int
    run: int
    exit_code: int | None
    #: it ended after we asked it to stop
    stopped: bool
    reason: str
    #: the command never ran: its federation's lease had expired when the wrapper looked
    #: (the run goes back to the queue rather than failing: docs/federation.md)
    not_started: bool = False


def local_indices(devices: Sequence[Device]) -> dict[str, int]:
    """Each device's index among the node's devices of its class and vendor: what
    ``CUDA_VISIBLE_DEVICES`` (NVIDIA) or ``ROCR_VISIBLE_DEVICES`` (AMD) count."""
    seen: dict[tuple[str, str], int] = {}
    out: dict[str, int] = {}
    for device in devices:
        group = (device.device_class, device.vendor.lower())
        out[device.id] = seen.get(group, 0)
        seen[group] = out[device.id] + 1
    return out


def device_env(devices: Sequence[tuple[Device, int, int]]) -> dict[str, str]:
    """How frameworks expect to see their devices: vendor variables with indices, and
    ``HETSCHED_DEVICES`` (JSON, every class, FPGAs included) with ids, models and shares.

    ``devices`` holds (device, share, index within its class and vendor on the node)."""
    nvidia: list[str] = []
    amd: list[str] = []
    described = []
    for device, share, index in devices:
        if device.device_class == "gpu" and device.vendor.lower() == "nvidia":
            nvidia.append(str(index))
        elif device.device_class == "gpu" and device.vendor.lower() in {"amd", "ati"}:
            amd.append(str(index))
        described.append(
            {
                "id": device.id,
                "class": device.device_class,
                "vendor": device.vendor,
                "model": device.model,
                "index": index,
                "share": share,
            }
        )
    return {
        # an empty value hides every GPU from a task that was given none
        "CUDA_VISIBLE_DEVICES": ",".join(nvidia),
        "ROCR_VISIBLE_DEVICES": ",".join(amd),
        "HIP_VISIBLE_DEVICES": ",".join(amd),
        "HETSCHED_DEVICES": json.dumps(described, separators=(",", ":")),
    }


@dataclass(slots=True)
class RunAs:
    """The OS account a task runs as (only when the service runs as root)."""

    uid: int
    gid: int


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
        """The earliest time :meth:`poll` has something to do besides reporting exits: a
        SIGTERM at the end of a notice, a SIGKILL after a grace period, a maximum runtime
        reached; None if nothing is due."""
        times = [h.kill_at for h in self.handles.values() if h.kill_at is not None]
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
    ) -> TaskHandle:
        """Spawn the task's process; raises OSError if it cannot be started. With
        ``fence`` (a federation's lease file) the task runs only while that lease is live."""
        directory = self.job_dir(job_id)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        exit_file = self.exit_file(job_id, task, run)
        exit_file.unlink(missing_ok=True)
        key = task_key(job_id, task, run)
        full_env = self._task_env(job_id, task, run, placement.node, devices, env)
        cwd = workdir or str(directory)
        if run_as is not None and workdir is None:
            # the home is private to the service: start in the account's own home
            cwd = _home_of(run_as.uid)
        wrapper = ["/bin/sh", "-c", _WRAPPER, "hetsched-task"]
        if fence is not None:
            fenced = [str(fence), str(self.fence_backstop_s)]
            wrapper = ["/bin/sh", "-c", _FENCED_WRAPPER, "hetsched-task", *fenced]
        header = f"--- hetsched: run {run} of task {task} on {placement.node} ---\n".encode()
        popen = self._spawn(
            job_id, task, exit_file, header, [*wrapper, *command], cwd, full_env, run_as
        )
        try:
            started = psutil.Process(popen.pid).create_time()
        except psutil.Error:
            started = time.time()
        now = time.time()
        handle = TaskHandle(
            job_id,
            task,
            run,
            popen.pid,
            started,
            exit_file,
            popen=popen,
            deadline=now + max_runtime_s if max_runtime_s else None,
        )
        self.handles[key] = handle
        self._watch(popen.pid)
        return handle

    def _task_env(
        self,
        job_id: str,
        task: int,
        run: int,
        node: str,
        devices: Sequence[tuple[Device, int, int]],
        env: Mapping[str, str],
    ) -> dict[str, str]:
        """The task's environment: the service's own, less its ``HETSCHED_*`` variables (the
        token), then the job's, its devices', and the task's identity."""
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("HETSCHED_")}
        full_env.update(env)
        full_env.update(device_env(devices))
        full_env.update(identity_env(job_id, task, run, node, self.instance))
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
        if not _alive(pid, pid_started):
            return None
        handle = TaskHandle(job_id, task, run, pid, pid_started, self.exit_file(job_id, task, run))
        handle.deadline = deadline
        self.handles[handle.key] = handle
        self._watch(pid)
        return handle

    def recorded_exit(self, job_id: str, task: int, run: int) -> int | None:
        """The exit code the wrapper wrote, if the task ended while nobody watched."""
        try:
            text = self.exit_file(job_id, task, run).read_text().strip()
            return FENCED_EXIT if text == _NOT_STARTED else int(text)
        except (OSError, ValueError):
            return None

    def _not_started(self, handle: TaskHandle) -> bool:
        try:
            return handle.exit_file.read_text().strip() == _NOT_STARTED
        except OSError:
            return False

    def find_leaders(self) -> dict[str, tuple[int, float]]:
        """Task key -> (pid, start time) of each live task wrapper of this instance: the
        session leader carrying the key. Finds tasks whose pid was never recorded."""
        found: dict[str, tuple[int, float]] = {}
        for proc in psutil.process_iter(["pid"]):
            try:
                environ = proc.environ()
                if environ.get("HETSCHED_INSTANCE") != self.instance:
                    continue
                if os.getsid(proc.pid) != proc.pid or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                found[environ["HETSCHED_TASK_KEY"]] = (proc.pid, proc.create_time())
            except (psutil.Error, OSError, KeyError):
                continue
        return found

    def sweep(self, live_keys: Iterable[str]) -> list[int]:
        """Kill process groups of this instance that no live task accounts for."""
        keep = set(live_keys)
        killed: list[int] = []
        for proc in psutil.process_iter(["pid"]):
            try:
                environ = proc.environ()
            except (psutil.Error, OSError):
                continue
            if environ.get("HETSCHED_INSTANCE") != self.instance:
                continue
            if environ.get("HETSCHED_TASK_KEY") in keep:
                continue
            _signal_group(proc.pid, signal.SIGKILL)
            killed.append(proc.pid)
        return killed

    # -- stop ----------------------------------------------------------------------------

    def stop(
        self,
        key: str,
        grace_s: float | None = None,
        now: float | None = None,
        notice_s: float = 0.0,
        notice_signal: str = "SIGUSR1",
    ) -> bool:
        """SIGTERM the task's group and SIGKILL it after the grace period. With
        ``notice_s`` the group first gets ``notice_signal`` and SIGTERM follows that much
        later (a task that checkpoints then exits sooner). A second call shortens a notice
        in progress (``notice_s`` 0: SIGTERM now), never lengthens it."""
        handle = self.handles.get(key)
        if handle is None:
            return False
        now = time.time() if now is None else now
        grace = self.kill_grace_s if grace_s is None else grace_s
        first = not handle.stopping
        handle.stopping = True
        if notice_s > 0 and first and handle.kill_at is None:
            _signal_group(handle.pid, signal.Signals[notice_signal])
            handle.term_at = now + notice_s
            handle.grace_s = grace
        elif handle.term_at is not None and notice_s > 0:
            handle.term_at = min(handle.term_at, now + notice_s)
        else:
            handle.term_at = None
            self._terminate(handle, grace, now)
        return True

    def _terminate(self, handle: TaskHandle, grace_s: float | None, now: float | None) -> None:
        now = time.time() if now is None else now
        grace = self.kill_grace_s if grace_s is None else grace_s
        if handle.kill_at is None:
            _signal_group(handle.pid, signal.SIGTERM)
            handle.kill_at = now + grace
        else:
            handle.kill_at = min(handle.kill_at, now + grace)

    def kill(self, key: str) -> bool:
        """SIGKILL the task's group now; its exit comes from a later :meth:`poll`. False
        when no such task is watched."""
        handle = self.handles.get(key)
        if handle is None:
            return False
        _signal_group(handle.pid, signal.SIGKILL)
        return True

    def kill_now(self, pid: int) -> None:
        _signal_group(pid, signal.SIGKILL)

    # -- watch ---------------------------------------------------------------------------

    def poll(self, now: float | None = None) -> list[TaskExit]:
        """Tasks whose main process ended since the last poll; escalates pending kills and
        enforces maximum runtimes."""
        now = time.time() if now is None else now
        exits: list[TaskExit] = []
        for key, handle in list(self.handles.items()):
            code = self._ended(handle)
            if code is None:
                if handle.term_at is not None and now >= handle.term_at:
                    handle.term_at = None  # the notice is over
                    self._terminate(handle, handle.grace_s, now)
                elif handle.kill_at is not None and now >= handle.kill_at:
                    _signal_group(handle.pid, signal.SIGKILL)
                    # again in a second while the group lingers, not at every poll
                    handle.kill_at = now + 1.0
                elif (
                    handle.deadline is not None
                    and now >= handle.deadline
                    and not (handle.stopping or handle.timed_out)
                ):
                    handle.timed_out = True
                    self._terminate(handle, None, now)
                continue
            del self.handles[key]
            # nothing of the task may outlive it: kill what is left of its group
            _signal_group(handle.pid, signal.SIGKILL)
            recorded = self.recorded_exit(handle.job_id, handle.task, handle.run)
            exit_code = recorded if recorded is not None else code[0]
            not_started = self._not_started(handle)
            if not_started:
                reason = "not started: its federation's lease had expired"
            elif handle.timed_out:
                reason = "exceeded its maximum runtime"
            elif exit_code is None:
                reason = "exit status unknown"
            elif exit_code < 0:
                reason = f"killed by signal {-exit_code}"
            elif exit_code > 128:
                reason = f"exit code {exit_code} (signal {exit_code - 128})"
            else:
                reason = f"exit code {exit_code}"
            exits.append(
                TaskExit(
                    handle.job_id,
                    handle.task,
                    handle.run,
                    exit_code,
                    handle.stopping,
                    reason,
                    not_started,
                )
            )
        return exits

    def _ended(self, handle: TaskHandle) -> tuple[int | None] | None:
        """None while running; else a 1-tuple with the return code when known."""
        if handle.popen is not None:
            code = handle.popen.poll()
            return None if code is None else (code,)
        if _alive(handle.pid, handle.pid_started):
            return None
        return (None,)

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


def _home_of(uid: int) -> str:
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        return "/"
    return home if os.path.isdir(home) else "/"


def _alive(pid: int, started: float) -> bool:
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - started) > _START_TOLERANCE_S:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def open_task_log(path: Path) -> int:
    """Open a task's log for appending (later runs of the task append to it); the one
    opener of both executors (the Ray executor appends its tasks' output here too).

    An earlier run could have replaced the file in its job directory by a hard link to a
    file it can read, or by something that is not a file; appending to that would write
    into another file as the service. Such an entry is removed and a fresh file created
    (O_EXCL: if the entry comes back in between, the start fails rather than follow it).
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NOCTTY
    create = flags | os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(path, flags | os.O_NONBLOCK)
    except FileNotFoundError:
        return os.open(path, create, 0o600)
    except OSError:
        fd = -1  # a symlink (ELOOP), a FIFO without a reader (ENXIO): replaced below
    if fd >= 0:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_uid == os.geteuid():
            os.set_blocking(fd, True)
            return fd
        os.close(fd)
    os.unlink(path)
    return os.open(path, create, 0o600)
