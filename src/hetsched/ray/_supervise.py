"""The supervisor of one task's process on a Ray node.

Run as a script with the standard library only, so it starts fast::

    python -I _supervise.py GUARD_FD STATUS_FD -- COMMAND [ARG...]

It detaches first (a double fork: the task runner that started it is not its parent, so Ray's
cleanup of a dying worker's children never reaches the task), becomes a session leader (the
task's process group is its own) and runs the command in that group, stdin from /dev/null,
stdout and stderr as it got them (the task's log files).

- SIGTERM, SIGINT and SIGHUP do not stop it: a stop signal to the group is for the command,
  and the supervisor waits for the command's exit status (as the local executor's ``sh``
  wrapper does). SIGKILL of the group ends it with everything else.
- The status pipe (STATUS_FD) gets ``pid <pid>`` once the command runs, and ``exit <code>``
  when the command has ended: its status as ``sh`` reports it (128+N for signal N, 127 for a program
  not found, 126 for one that cannot be executed).
- The guard pipe (GUARD_FD) never carries data. End-of-file means the runner (the task's Ray
  actor) is gone, and then the whole group is killed: a task never outlives its actor.
- When the command has ended, whatever is left of its group is killed, the supervisor too.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from types import FrameType


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    """A handler, not SIG_IGN: the command starts with the default dispositions."""


def _wait(child: subprocess.Popen[bytes], guard: int) -> int:
    try:
        pidfd: int | None = os.pidfd_open(child.pid)
    except (AttributeError, OSError):
        pidfd = None
    while True:
        watched = [guard] if pidfd is None else [guard, pidfd]
        readable, _, _ = select.select(watched, [], [], 0.2 if pidfd is None else None)
        if guard in readable and not os.read(guard, 64):
            os.killpg(0, signal.SIGKILL)
        code = child.poll()
        if code is not None:
            return code if code >= 0 else 128 - code


def main(argv: list[str]) -> int:
    guard, status = int(argv[1]), int(argv[2])
    if argv[3] != "--" or len(argv) < 5:
        sys.stderr.write("usage: _supervise.py GUARD_FD STATUS_FD -- COMMAND [ARG...]\n")
        return 2
    command = argv[4:]
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, close_fds=True)
    except FileNotFoundError:
        sys.stderr.write(f"hetsched-task: {command[0]}: not found\n")
        code = 127
    except OSError as exc:
        sys.stderr.write(f"hetsched-task: {command[0]}: {exc.strerror or exc}\n")
        code = 126
    else:
        # only now: a stop signal sent once the pid is known must reach the command
        os.write(status, f"pid {os.getpid()}\n".encode())
        code = _wait(child, guard)
    sys.stderr.flush()
    os.write(status, f"exit {code}\n".encode())
    os.killpg(0, signal.SIGKILL)
    return code  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
