"""Task logs under a cap: cut in place to their newest half, after a line saying how much
was dropped; a running task's writes go on after it."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.agent.executor import Executor
from hetsched.agent.logcap import LogCap, cap_log
from hetsched.cluster.placement import Placement
from hetsched.drivers.executor import Launch
from hetsched.keys import TaskKey


def test_a_log_past_its_cap_keeps_its_newest_half_from_a_line_start(tmp_path: Path) -> None:
    log = tmp_path / "task-0.out"
    lines = [f"line {i:04d}\n".encode() for i in range(1000)]  # 10 bytes each
    log.write_bytes(b"".join(lines))
    assert cap_log(log, 20_000) == 0  # under the cap: untouched
    dropped = cap_log(log, 1000)
    text = log.read_bytes()
    first, rest = text.split(b"\n", 1)
    # 500 bytes kept, cut at a line's start: the last 49 lines whole (490 bytes)
    assert rest == b"".join(lines[-49:])
    assert dropped == 10_000 - 490
    assert (
        first
        == (
            f"--- hetsched: {dropped} bytes of earlier output dropped "
            "(this log is kept under 1000 bytes) ---"
        ).encode()
    )
    assert len(text) <= 1000


def test_a_chatty_task_stays_under_the_cap(tmp_path: Path) -> None:
    executor = Executor(tmp_path / "home", "cap-test", logs=LogCap(64 * 1024, interval_s=0.05))
    key = TaskKey("j1", 0, 1)
    # 400 KiB in lines of 1 KiB, a little at a time, then a last line
    script = (
        "i=0; while [ $i -lt 400 ]; do head -c 1023 /dev/zero | tr '\\0' x; echo; "
        "i=$((i+1)); sleep 0.002; done; echo last"
    )
    launch = Launch(("sh", "-c", script), {})
    executor.spawn(key, Placement("n1", 100, 64), launch)
    log = executor.log_path("j1", 0, "stdout")
    largest = 0
    deadline = time.monotonic() + 60
    exits = []
    while not exits:
        assert time.monotonic() < deadline
        exits = executor.poll()
        largest = max(largest, log.stat().st_size)
        time.sleep(0.01)
    assert exits[0].code == 0
    text = log.read_bytes()
    assert text.endswith(b"last\n")
    assert b"bytes of earlier output dropped" in text
    assert executor.logs.dropped > 300 * 1024
    # looked at every 50 ms: the log never grew far past the cap between looks
    assert largest < 64 * 1024 + 200 * 1024
    executor.shutdown()


@settings(max_examples=200, deadline=None)
@given(
    content=st.binary(max_size=4000),
    cap=st.integers(min_value=200, max_value=3000),
)
def test_a_cut_log_is_a_note_and_a_suffix_of_what_it_held(content: bytes, cap: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "task-0.out"
        log.write_bytes(content)
        dropped = cap_log(log, cap)
        after = log.read_bytes()
    if len(content) <= cap:
        assert (dropped, after) == (0, content)
        return
    note, tail = after.split(b"\n", 1)
    assert (
        note
        == (
            f"--- hetsched: {dropped} bytes of earlier output dropped "
            f"(this log is kept under {cap} bytes) ---"
        ).encode()
    )
    # the newest output, at most half the cap, and nothing else
    assert content.endswith(tail) and len(tail) <= cap // 2
    assert dropped == len(content) - len(tail)
    assert len(after) <= cap
