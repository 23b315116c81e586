"""The ``/bin/sh`` wrapper every local task runs under, and what it leaves behind.

The wrapper writes the command's exit status to the task's exit file when it ends: that
file is how an exit status survives a control-plane crash (a restarted service learns the
status of a task that ended while nobody watched). A fenced task's wrapper (a federation's
lease, ``service/fencing.py``) also refuses to start the command once the lease expired and
kills its own group when the lease has lapsed for the backstop.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import shutil
import signal
from collections.abc import Iterable
from pathlib import Path

import psutil

__all__ = [
    "FENCED_EXIT",
    "adoptable",
    "disk_fault",
    "find_leaders",
    "forget_exit",
    "forget_journal",
    "home_of",
    "journal_exit",
    "journaled_exit",
    "never_ran",
    "not_started",
    "read_exit",
    "running",
    "same_start",
    "signal_group",
    "sweep",
    "sync_files",
    "wrapper_argv",
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
#: Before the command it writes ``started`` there: an exit file that is empty tells a
#: restart that the service died between making the file and spawning the wrapper, so the
#: command never ran (:func:`never_ran`).
_WRAPPER = f'trap : {_TRAPPED}; echo started >&0; "$@" </dev/null; c=$?; echo "$c" >&0; exit "$c"'
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
    "echo fenced >&0; exit 125; fi; echo started >&0; "
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


def wrapper_argv(fence: Path | None, backstop_s: int) -> list[str]:
    """The wrapper's argv, before the command's: fenced by the lease file ``fence``."""
    if fence is None:
        return ["/bin/sh", "-c", _WRAPPER, "hetsched-task"]
    return ["/bin/sh", "-c", _FENCED_WRAPPER, "hetsched-task", str(fence), str(backstop_s)]


def _last_line(exit_file: Path) -> str:
    lines = exit_file.read_text().split()
    return lines[-1] if lines else ""


def read_exit(exit_file: Path) -> int | None:
    """The exit status the wrapper wrote (FENCED_EXIT for a command it did not start), or
    None while there is none."""
    try:
        text = _last_line(exit_file)
        return FENCED_EXIT if text == _NOT_STARTED else int(text)
    except (OSError, ValueError):
        return None


def never_ran(exit_file: Path) -> bool:
    """Whether no wrapper started the command of ``exit_file``'s task: the file is missing
    (never made) or empty (made, but the wrapper was never spawned, or never got to it)."""
    try:
        return exit_file.stat().st_size == 0
    except FileNotFoundError:
        return True


def not_started(exit_file: Path) -> bool:
    """Whether the fenced wrapper refused to start the command."""
    try:
        return exit_file.read_text().strip() == _NOT_STARTED
    except OSError:
        return False


def home_of(uid: int) -> str:
    """Where a task running as account ``uid`` starts when its job names no directory."""
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        return "/"
    return home if os.path.isdir(home) else "/"


def adoptable(pid: int, started: float) -> psutil.Process | None:
    """The process ``pid`` if it is the one that started at ``started`` and runs still
    (not a zombie); None otherwise."""
    try:
        process = psutil.Process(pid)
        if same_start(process.create_time(), started) and running(process):
            return process
    except psutil.Error:
        pass
    return None


def running(process: psutil.Process) -> bool:
    """Whether ``process`` runs still: the same process (psutil's identity since boot,
    which does not move with the clock), not a zombie."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def same_start(seen: float, recorded: float) -> bool:
    """Whether a process start time read now is the one recorded earlier.

    The kernel keeps a process's start in clock ticks since boot; the wall-clock time is
    that plus the boot time, which Linux gives in whole seconds and recomputes from the
    current clock, so the same process reads a whole second apart when the clock is slewed
    (NTP) across a rounding edge. A whole-second difference is that jitter, not another
    process: only the fraction must match.
    """
    offset = seen - recorded
    whole = round(offset)
    return abs(whole) <= 1 and abs(offset - whole) <= _START_TOLERANCE_S


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group led by ``pid``; one that is gone is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


#: errno values of a node whose disk cannot take a task's files
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


def disk_fault(exc: OSError) -> bool:
    """Whether ``exc`` says the node's disk cannot take a task's files (full, read-only,
    failing): the node's fault, not the job's, so the task waits rather than fails."""
    return exc.errno in _DISK_ERRNOS


def sync_files(*paths: Path) -> bool:
    """Flush what a task left (its exit file, its logs) and their folders to the disk, so a
    crash of the filesystem keeps what the service was told. False when the disk refused
    (what it holds of them may be lost); a file that is gone is no error here."""
    synced = True
    for path in [*paths, *{p.parent for p in paths}]:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            synced = False
        finally:
            os.close(fd)
    return synced


#: where an exit status goes that the task's exit file cannot take (its disk is full or
#: read-only): memory-backed, so it outlives the service (a restart reads it), not the
#: machine
EXIT_JOURNAL = Path("/dev/shm")


def _journal_entry(instance: str, key: str) -> Path:
    # a task key is job/task#run: one file name of it
    return EXIT_JOURNAL / f"hetsched-exits-{instance}" / key.replace("/", "_")


def journal_exit(instance: str, key: str, code: int) -> None:
    """Journal the exit status of task ``key`` that the control plane's store has not
    taken, where its home's disk may lose the exit file (full, read-only, failing): read
    back by :func:`journaled_exit` after a restart. Best effort."""
    entry = _journal_entry(instance, key)
    with contextlib.suppress(OSError):
        entry.parent.mkdir(mode=0o700, exist_ok=True)
        entry.write_text(f"{code}\n")


def forget_exit(instance: str, key: str) -> None:
    """Drop task ``key``'s journaled status (the key runs again)."""
    with contextlib.suppress(OSError):
        _journal_entry(instance, key).unlink()


def forget_journal(instance: str) -> None:
    """Drop the instance's journal (once the store has every exit it held)."""
    shutil.rmtree(_journal_entry(instance, "x").parent, ignore_errors=True)


def journaled_exit(instance: str, key: str) -> int | None:
    """The exit status :func:`keep_exit` journaled for task ``key``, if any."""
    return read_exit(_journal_entry(instance, key))


def find_leaders(instance: str) -> dict[str, tuple[int, float]]:
    """Task key -> (pid, start time) of each live task wrapper of ``instance``: the session
    leader carrying the key (its environment says so)."""
    found: dict[str, tuple[int, float]] = {}
    for proc in psutil.process_iter(["pid"]):
        try:
            environ = proc.environ()
            if environ.get("HETSCHED_INSTANCE") != instance:
                continue
            if os.getsid(proc.pid) != proc.pid or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            found[environ["HETSCHED_TASK_KEY"]] = (proc.pid, proc.create_time())
        except (psutil.Error, OSError, KeyError):
            continue
    return found


def sweep(instance: str, live_keys: Iterable[str]) -> list[int]:
    """Kill the process groups of ``instance`` that no key of ``live_keys`` accounts for;
    the pids signalled."""
    keep = set(live_keys)
    killed: list[int] = []
    for proc in psutil.process_iter(["pid"]):
        try:
            environ = proc.environ()
        except (psutil.Error, OSError):
            continue
        if environ.get("HETSCHED_INSTANCE") != instance:
            continue
        if environ.get("HETSCHED_TASK_KEY") in keep:
            continue
        signal_group(proc.pid, signal.SIGKILL)
        killed.append(proc.pid)
    return killed
