"""The CLI's tables against the real service, at 80 columns on a terminal and through a
pipe: no job id, device id or state is ever cut (``jobs -o wide``, ``job``, ``queues``), and
``why`` leads with the current reason."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator

import pytest
from rich.console import Console
from service_fixtures import Api, job_body
from typer.testing import CliRunner

from hetsched.cli import jobs as jobs_cli
from hetsched.cli import output
from hetsched.cli.main import app

#: a long job name, and a long path in a command
LONG_NAME = "nightly-embedding-refresh-for-search"
DATA = "/datasets/imagenet/train/shards/shard-00001-of-01024.tfrecord"


@pytest.fixture
def jobs(api: Api) -> Iterator[dict[str, str]]:
    """Three jobs: one succeeded, one running on two of the GPU node's three GPUs, one
    pending for all three (no node fits it now; the FPGA node has no GPU at all)."""
    done = api.alice.post("/v1/jobs", json=job_body(name=LONG_NAME)).json()["id"]
    api.wait(api.alice, done, {"succeeded"})
    gpus = {"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "count": 2}]}
    held = job_body(name="hold", command=["sh", "-c", "sleep 60", DATA], resources=gpus)
    running = api.alice.post("/v1/jobs", json=held).json()["id"]
    api.wait(api.alice, running, {"running"})
    three = {"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "count": 3}]}
    pending = api.alice.post("/v1/jobs", json=job_body(name="w", resources=three)).json()["id"]
    api.wait(api.alice, pending, {"pending"})
    yield {"succeeded": done, "running": running, "pending": pending}


def _cli(api: Api, width: int | None, *args: str) -> str:
    """The command's standard output: on an 80-column terminal (``width``), or through a
    pipe (None: what CliRunner gives a command)."""
    env = {"HETSCHED_URL": api.url, "HETSCHED_TOKEN": api.tokens["alice"]}
    buffer = io.StringIO()
    terminal = Console(file=buffer, width=width or 80, force_terminal=True, color_system=None)
    saved = (output.__dict__.get("console"), jobs_cli.console)
    if width is not None:
        output.console = jobs_cli.console = terminal
    try:
        result = CliRunner().invoke(app, list(args), env=env)
    finally:
        output.console, jobs_cli.console = saved  # type: ignore[assignment]
    assert result.exit_code == 0, result.output
    return buffer.getvalue() + result.stdout


@pytest.mark.parametrize("width", [80, None], ids=["terminal-80", "pipe"])
def test_jobs_wide_never_cuts_an_id_or_a_state(
    api: Api, jobs: dict[str, str], width: int | None
) -> None:
    text = _cli(api, width, "jobs", "--all", "-o", "wide")
    assert "…" not in text, text
    for state, job_id in jobs.items():
        line = next(line for line in text.splitlines() if job_id in line)
        assert state in line, text
    assert LONG_NAME in text
    if width is not None:
        assert max(len(line) for line in text.splitlines()) <= width
    else:  # a pipe: full-width columns with every field
        header = text.splitlines()[1].split()
        assert header[:7] == ["id", "name", "user", "queue", "prio", "state", "age"]


@pytest.mark.parametrize("width", [80, None], ids=["terminal-80", "pipe"])
def test_job_shows_whole_device_ids_and_paths(
    api: Api, jobs: dict[str, str], width: int | None
) -> None:
    detail = api.alice.get(f"/v1/jobs/{jobs['running']}").json()
    device_ids = [d["id"] for t in detail["tasks"] for d in t["devices"]]
    assert len(device_ids) == 2
    text = _cli(api, width, "job", jobs["running"])
    assert "…" not in text, text
    for device_id in device_ids:
        assert device_id in text, text
    assert f"{'state':>10}  running" in text
    # the command is one line, its path whole (a terminal wraps it where it must)
    assert f"{'command':>10}  sh -c sleep 60 {DATA}\n" in text, text


@pytest.mark.parametrize("width", [80, None], ids=["terminal-80", "pipe"])
def test_queues_show_whole_states(api: Api, jobs: dict[str, str], width: int | None) -> None:
    text = _cli(api, width, "queues")
    assert "…" not in text, text
    assert "1 succeeded" in text and "1 pending" in text and "1 running" in text, text


def test_why_leads_with_the_current_reason(api: Api, jobs: dict[str, str]) -> None:
    text = _cli(api, None, "why", jobs["pending"])
    headline = text.splitlines()[0]
    assert headline.startswith(f"{jobs['pending']} (w) is pending: ")
    assert "submitted" not in headline and "fit" in headline, text
    # the FPGA node (and this machine's, without a GPU) has no GPU: not "no healthy gpu"
    assert re.search(r"\n  - no gpu: [12] nodes?\n", text), text
    assert re.search(r"\n  - insufficient free gpu \(want 3x gpu\): [12] nodes?\n", text), text


def test_token_list_has_a_header(api: Api) -> None:
    env = {"HETSCHED_URL": api.url, "HETSCHED_TOKEN": api.svc.admin_token}
    result = CliRunner().invoke(app, ["token", "list"], env=env)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["id", "user", "role", "state"]
    rows = [line.split() for line in lines[2:]]
    users = {(r[1], r[2], r[3]) for r in rows}
    assert users >= {("alice", "user", "live"), ("bob", "user", "live")}


def test_in_a_pseudo_terminal_of_80_columns_nothing_is_cut(api: Api, jobs: dict[str, str]) -> None:
    """The real command in a pseudo-terminal 80 columns wide: rich sees a terminal there."""
    main, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {
        **os.environ,
        "HETSCHED_URL": api.url,
        "HETSCHED_TOKEN": api.tokens["alice"],
        "COLUMNS": "80",
        "LINES": "24",
        "TERM": "dumb",
    }
    code = "from hetsched.cli.main import main; main()"
    command = [sys.executable, "-c", code, "jobs", "--all", "-o", "wide"]
    with subprocess.Popen(command, stdout=follower, stderr=subprocess.PIPE, env=env) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the follower closed: the command is done
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=60) == 0, process.stderr.read() if process.stderr else ""
    os.close(main)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode())
    assert "┃ id " in text, text  # drawn as a table: rich saw a terminal
    assert "…" not in text, text
    for state, job_id in jobs.items():
        line = next(line for line in text.splitlines() if job_id in line)
        assert state in line, text
    assert max(len(line.rstrip("\r")) for line in text.splitlines()) <= 80


def test_jobs_wide_gives_a_pending_job_its_current_reason(api: Api, jobs: dict[str, str]) -> None:
    """Through a pipe every column is there: the pending job's reason is why it waits now,
    not "submitted" (the cause of its last transition)."""
    text = _cli(api, None, "jobs", "--all", "-o", "wide")
    line = next(line for line in text.splitlines() if jobs["pending"] in line)
    assert "submitted" not in line and "fit" in line, text
    detail = _cli(api, None, "job", jobs["pending"])
    assert re.search(r"\n\s+reason  .*fit", detail) and "submitted" not in detail, detail
    listed = api.alice.get("/v1/jobs").json()
    pending = next(j for j in listed if j["id"] == jobs["pending"])
    assert pending["reason"] == "submitted" and "fit" in pending["pending_reason"]
    running = next(j for j in listed if j["id"] == jobs["running"])
    assert running["pending_reason"] is None
