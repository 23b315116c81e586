"""How soon ``make demo`` prints its first line: the demo (``python -m hetsched.service.demo``)
started in a pseudo-terminal of 80x24, timed from the start of the process to its first
printed line; the demo is then stopped (SIGINT) before it goes on.

    .venv/bin/python bench/demo_first_line.py [--runs 5]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import signal
import statistics
import struct
import subprocess
import sys
import termios
import time


def first_line_s() -> float:
    main, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetsched.service.demo"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "TERM": "xterm"},
    )
    os.close(follower)
    seen = b""
    while b"\n" not in seen:
        seen += os.read(main, 4096)
    elapsed = time.perf_counter() - started
    proc.send_signal(signal.SIGINT)  # the demo stops its service on the way out
    proc.wait(timeout=60)
    os.close(main)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    times = [first_line_s() for _ in range(args.runs)]
    print(
        f"first line after {statistics.median(times):.2f} s (median of {args.runs}; "
        f"max {max(times):.2f} s; load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
