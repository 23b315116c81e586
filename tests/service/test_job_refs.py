"""Jobs by name or id prefix (``why``, ``logs``, ``job``, ``cancel``), and cancelling many
jobs in one atomic request (``cancel ID...``, ``cancel --queue Q --state pending --mine``),
against the real service; CLI output at 80 columns on a terminal and through a pipe."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from service_fixtures import Api, job_body, service_options, serving
from typer.testing import CliRunner

from hetsched.cli import cancel as cancel_cli
from hetsched.cli import jobs as jobs_cli
from hetsched.cli import output
from hetsched.cli.cancel import CONFIRM_ABOVE, confirm_needed
from hetsched.cli.main import app

#: a job that waits: it needs all 16 cores of the one node that has them
WHOLE_NODE = {"cpu": "16", "memory": "1Gi"}


def _cli(api: Api, user: str, width: int | None, *args: str) -> tuple[int, str]:
    """Exit code and output (stdout and stderr) of a command as ``user``: on an 80-column
    terminal (``width``), or through a pipe (None)."""
    token = api.svc.admin_token if user == "admin" else api.tokens[user]
    env = {"HETSCHED_URL": api.url, "HETSCHED_TOKEN": token}
    buffer = io.StringIO()
    terminal = Console(file=buffer, width=width or 80, force_terminal=True, color_system=None)
    saved = (output.__dict__.get("console"), jobs_cli.console, cancel_cli.console)
    if width is not None:
        output.console = jobs_cli.console = cancel_cli.console = terminal
    try:
        result = CliRunner().invoke(app, list(args), env=env)
    finally:
        output.console, jobs_cli.console, cancel_cli.console = saved  # type: ignore[assignment]
    return result.exit_code, buffer.getvalue() + result.output


def _submit(api: Api, who: str, name: str, resources: dict[str, object] | None = None) -> str:
    client = api.admin if who == "admin" else getattr(api, who)
    body = job_body(name=name, command=["sleep", "60"], resources=resources or WHOLE_NODE)
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def _state(api: Api, job_id: str) -> str:
    return str(api.admin.get(f"/v1/jobs/{job_id}").json()["state"])


@pytest.mark.parametrize("width", [80, None], ids=["terminal-80", "pipe"])
def test_why_job_and_logs_take_a_unique_name_or_id_prefix(api: Api, width: int | None) -> None:
    running = _submit(api, "alice", "holder")
    api.wait(api.alice, running, {"running"})
    embed = _submit(api, "alice", "batch-embed")
    api.wait(api.alice, embed, {"pending"})
    code, text = _cli(api, "alice", width, "why", "batch-embed")
    assert code == 0, text
    assert text.splitlines()[0].startswith(f"{embed} (batch-embed) is pending: "), text
    code, text = _cli(api, "alice", width, "job", embed[:6])
    assert code == 0 and embed in text and "batch-embed" in text, text
    code, text = _cli(api, "alice", width, "logs", "holder")
    assert code == 0, text
    # another user's job is not found by its name: nothing is revealed
    code, text = _cli(api, "bob", width, "why", "batch-embed")
    assert code != 0 and "no job 'batch-embed'" in text, text


@pytest.mark.parametrize("width", [80, None], ids=["terminal-80", "pipe"])
def test_an_ambiguous_name_lists_the_candidates(api: Api, width: int | None) -> None:
    first = _submit(api, "alice", "twin")
    second = _submit(api, "alice", "twin")
    code, text = _cli(api, "alice", width, "why", "twin")
    assert code != 0
    assert "'twin' names 2 jobs: give an id" in text, text
    for job_id in (first, second):
        assert any(job_id in line and "twin" in line for line in text.splitlines()), text
    code, text = _cli(api, "alice", width, "cancel", "twin")
    assert code != 0 and "nothing was cancelled" in text, text
    assert _state(api, first) != "cancelled" and _state(api, second) != "cancelled"
    # the ids themselves still work, and so does a prefix of one
    code, text = _cli(api, "alice", width, "why", first)
    assert code == 0, text


def test_cancel_many_by_name_is_all_or_nothing(api: Api) -> None:
    a = _submit(api, "alice", "first")
    b = _submit(api, "alice", "second")
    code, text = _cli(api, "alice", None, "cancel", "first", "nosuch")
    assert code != 0 and "nosuch: no such job" in text and "nothing was cancelled" in text
    assert _state(api, a) != "cancelled"
    code, text = _cli(api, "alice", None, "cancel", "first", b)
    assert code == 0, text
    assert f"{a}  first  alice" in text and f"{b}  second  alice" in text, text
    assert "cancel requested for 2 jobs" in text
    api.wait(api.alice, a, {"cancelled"})
    api.wait(api.alice, b, {"cancelled"})


@pytest.mark.parametrize("width", [80, None], ids=["terminal-80", "pipe"])
def test_cancel_by_filter_with_a_dry_run(api: Api, width: int | None) -> None:
    holder = _submit(api, "alice", "holder")
    api.wait(api.alice, holder, {"running"})
    pending = [_submit(api, "alice", f"p{i}") for i in range(3)]
    bobs = _submit(api, "bob", "bobs")
    admins = _submit(api, "admin", "elsewhere")
    for job_id in [*pending, bobs, admins]:
        api.wait(api.admin, job_id, {"pending"})
    args = ["cancel", "--queue", "default", "--state", "pending", "--mine"]
    code, text = _cli(api, "alice", width, *args, "--dry-run")
    assert code == 0, text
    assert "would cancel 3 jobs" in text, text
    assert all(job_id in text for job_id in pending) and bobs not in text, text
    assert all(_state(api, j) == "pending" for j in pending)
    code, text = _cli(api, "alice", width, *args)
    assert code == 0 and "cancel requested for 3 jobs" in text, text
    for job_id in pending:
        api.wait(api.alice, job_id, {"cancelled"})
    # the running job, bob's and the admin's are untouched
    assert _state(api, holder) == "running"
    assert _state(api, bobs) == "pending" and _state(api, admins) == "pending"
    # an admin's --mine keeps to the admin's own jobs
    code, text = _cli(api, "admin", width, "cancel", "--state", "pending", "--mine", "-o", "json")
    assert code == 0, text
    assert _state(api, bobs) == "pending"
    api.wait(api.admin, admins, {"cancelled"})


def test_only_an_admin_cancels_for_another_user(api: Api) -> None:
    bobs = _submit(api, "bob", "bobs")
    answer = api.alice.post("/v1/jobs/cancel", json={"user": "bob"})
    assert answer.status_code == 403
    answer = api.alice.post("/v1/jobs/cancel", json={"ids": [bobs]})
    assert answer.status_code == 404
    assert _state(api, bobs) != "cancelled"
    answer = api.alice.post("/v1/jobs/cancel", json={"ids": ["x"], "queue": "default"})
    assert answer.status_code == 422 and "not both" in answer.text
    answer = api.alice.post("/v1/jobs/cancel", json={"states": ["succeeded"]})
    assert answer.status_code == 422


def test_confirmation_threshold() -> None:
    assert not confirm_needed(CONFIRM_ABOVE, yes=False, interactive=True)
    assert confirm_needed(CONFIRM_ABOVE + 1, yes=False, interactive=True)
    assert not confirm_needed(CONFIRM_ABOVE + 1, yes=True, interactive=True)
    assert not confirm_needed(CONFIRM_ABOVE + 1, yes=False, interactive=False)


@pytest.mark.parametrize("answer", ["n", "y"])
def test_on_a_terminal_many_jobs_are_confirmed_first(api: Api, answer: str) -> None:
    """In a pseudo-terminal, cancelling more than the threshold lists the jobs and asks;
    "n" cancels nothing, "y" cancels exactly the jobs listed."""
    holder = _submit(api, "alice", "holder")
    api.wait(api.alice, holder, {"running"})
    pending = [_submit(api, "alice", f"p{i}") for i in range(CONFIRM_ABOVE + 1)]
    main, follower = pty.openpty()
    env = {
        **os.environ,
        "HETSCHED_URL": api.url,
        "HETSCHED_TOKEN": api.tokens["alice"],
        "COLUMNS": "80",
        "TERM": "dumb",
    }
    code = "from hetsched.cli.main import main; main()"
    command = [sys.executable, "-c", code, "cancel", "--state", "pending"]
    with subprocess.Popen(
        command, stdin=follower, stdout=follower, stderr=follower, env=env
    ) as process:
        os.close(follower)
        seen = b""
        while b"[y/N]" not in seen:
            seen += os.read(main, 65536)
        os.write(main, answer.encode() + b"\n")
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        code_out = process.wait(timeout=60)
    os.close(main)
    text = seen.decode()
    assert f"Cancel these {CONFIRM_ABOVE + 1} jobs?" in text
    assert all(job_id in text for job_id in pending)
    if answer == "n":
        assert code_out != 0 and "nothing was cancelled" in text
        assert all(_state(api, j) == "pending" for j in pending)
    else:
        assert code_out == 0, text
        for job_id in pending:
            api.wait(api.alice, job_id, {"cancelled"})
    assert _state(api, holder) == "running"


@pytest.fixture
def preempting(tmp_path: Path) -> Iterator[Api]:
    """The service with a profile that preempts lower-priority work."""
    profile = tmp_path / "profile.yaml"
    profile.write_text("queue_sort: priority\npost_filter: [preemption]\n")
    with serving(service_options(tmp_path, profile=profile)) as api:
        yield api


@pytest.mark.parametrize("width", [80, None], ids=["terminal-80", "pipe"])
def test_why_says_who_preempted_a_job(preempting: Api, width: int | None) -> None:
    api = preempting
    low = _submit(api, "alice", "low")
    api.wait(api.alice, low, {"running"})
    body = job_body(name="high", user="bob", priority=100, command=["sleep", "60"])
    high = api.admin.post("/v1/jobs", json={**body, "resources": WHOLE_NODE}).json()["id"]
    api.wait(api.admin, high, {"running"})
    api.wait(api.alice, low, {"pending"})
    code, text = _cli(api, "alice", width, "why", "low")
    assert code == 0, text
    assert re.search(r"\npreempted by high \(bob, priority 100\) at \d\d:\d\d:\d\d\n", text), text
    story = api.alice.get(f"/v1/jobs/{low}/why").json()
    assert story["preempted_by"]["id"] == high and story["displaced_by"] is None
