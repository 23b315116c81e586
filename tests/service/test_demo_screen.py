"""The demo fits an 80x24 terminal and shows its point: the live table fits the screen's
height and width, with a node column and short reasons, and an event line says which job
preempted which, at which checkpoint step; the closing hint names no stopped service."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest
from rich.console import Console
from screen import Screen

from hetsched.service.demo_view import Events, fit_rows, node_cell, short_reason, view


def _job(i: int, state: str = "succeeded", **extra: object) -> dict[str, object]:
    job: dict[str, object] = {
        "id": f"j{i:016x}",
        "name": f"job-{i}",
        "user": "erin",
        "priority": 0,
        "state": state,
        "reason": "all tasks succeeded" if state == "succeeded" else "no node fits it now",
        "run": 1,
        "preemptions": 0,
        "tasks": [],
    }
    job.update(extra)
    return job


def test_the_view_fits_24_lines_and_80_columns() -> None:
    jobs = [_job(i) for i in range(30)] + [
        _job(30, "running", tasks=[{"node": "demo-a100-0", "state": "running"}]),
        _job(31, "pending"),
    ]
    events = Events(["urgent-train preempted batch-embed at checkpoint step 4"])
    console = Console(width=80, height=24, color_system=None, force_terminal=True)
    lines = console.render_lines(view(jobs, events, 24, 3.0), pad=False)
    text = ["".join(segment.text for segment in line) for line in lines]
    assert len(text) <= 24 - 1, text  # and a line for the cursor
    assert max(len(line) for line in text) <= 80
    joined = "\n".join(text)
    assert "job-30" in joined and "demo-a100-0" in joined and "job-31" in joined
    assert "» urgent-train preempted batch-embed at checkpoint step 4" in joined
    assert re.search(r"\d+ of 32 jobs done; \d+ not shown", joined), joined


def test_rows_kept_are_the_live_ones_then_the_latest() -> None:
    jobs = [_job(0), _job(1, "running"), _job(2), _job(3, "pending"), _job(4)]
    shown, hidden = fit_rows(jobs, 3)
    assert [j["name"] for j in shown] == ["job-1", "job-3", "job-4"] and hidden == 2
    assert fit_rows(jobs, 9) == (jobs, 0)


def test_short_reasons_and_the_node() -> None:
    preempted = _job(1, "pending", reason="preempted by jab (priority); it gets a 10s notice")
    assert short_reason(preempted) == "preempted"
    assert short_reason(_job(2, "pending")) == "no node fits it now"
    assert short_reason(_job(3, "running", run=2)) == "run 2, resumed"
    assert short_reason(_job(4, preemptions=1)) == "done after 1 preemption"
    two = [{"node": "a", "state": "running"}, {"node": "b", "state": "running"}]
    assert node_cell(_job(5, "running", tasks=two)) == "a+1"
    assert node_cell(_job(6)) == "-"


def test_an_event_names_the_preemptor_and_the_checkpoint() -> None:
    urgent = _job(1, "running", name="urgent-train")
    embed = _job(2, "running", name="batch-embed")
    events = Events()
    events.seen([urgent, embed], {})
    assert events.lines == []
    stopped = {**embed, "state": "pending", "preemptions": 1, "checkpoint": {"step": 4}}
    history = {embed["id"]: ["submitted", f"preempted by {urgent['id']} (priority); it ..."]}
    events.seen([urgent, stopped], history)  # type: ignore[list-item]
    events.seen([urgent, stopped], history)  # type: ignore[list-item]
    assert events.lines == ["urgent-train preempted batch-embed at checkpoint step 4"]


@pytest.mark.slow
def test_the_demo_in_a_pseudo_terminal_of_80x24() -> None:
    """The real demo: at some moment the screen shows the preemption's event line together
    with the table's title (the table fits: nothing pushed the line off), and the closing
    lines name no stopped service's command."""
    main, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "80", "LINES": "24"}
    screen = Screen(24, 80)
    event = re.compile(r"» urgent-train preempted batch-embed at checkpoint step \d+")
    together = False
    first: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-m", "hetsched.service.demo"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    ) as process:
        os.close(follower)
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen.feed(chunk.decode(errors="replace"))
            shown = screen.text()
            first = first or [line for line in shown if line]
            on_screen = "\n".join(shown)
            if event.search(on_screen) and re.search(r"hetsched demo: \d+s", on_screen):
                together = True
        assert process.wait(timeout=180) == 0, "\n".join(screen.text())
    os.close(main)
    assert first and first[0].startswith("starting hetsched up --demo on http://127.0.0.1:")
    assert together, "\n".join(screen.text())
    final = "\n".join(screen.text())
    assert "hetsched up stopped" in final
    assert not re.search(r"hetsched (logs|why|job) j[0-9a-f]", final), final
    assert "to try it yourself: .venv/bin/hetsched up --demo &" in final
