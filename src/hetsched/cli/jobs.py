"""``hetsched submit | jobs | job | logs | why``: jobs through the API (``cancel`` is in
:mod:`hetsched.cli.cancel`)."""

from __future__ import annotations

import sys
import time
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.markup import escape

from hetsched.cli.client import Client, get
from hetsched.cli.job_tables import print_job, print_jobs
from hetsched.cli.job_text import checkpoint_lines, plural, speed_lines
from hetsched.cli.output import console, err_console, print_json

__all__ = ["ListFormat", "Output", "explanation_lines", "job", "jobs", "logs", "why"]

_TERMINAL = {"succeeded", "failed", "cancelled", "rejected"}
_REF_HELP = "The job: its id, a unique id prefix, or a unique name among your jobs."


class ListFormat(StrEnum):
    table = "table"
    wide = "wide"
    json = "json"


Output = Annotated[ListFormat, typer.Option("-o", "--output", help="table, wide or json.")]


def jobs(
    all: Annotated[bool, typer.Option("--all", help="Include finished jobs.")] = False,
    queue: Annotated[str | None, typer.Option(help="Only this queue.")] = None,
    state: Annotated[
        str | None,
        typer.Option(help="Only jobs in these states (comma-separated: pending,running,...)."),
    ] = None,
    newest: Annotated[bool, typer.Option("--newest", help="Latest jobs first.")] = False,
    limit: Annotated[
        int, typer.Option(min=1, max=10_000, help="Jobs per page (the service pages).")
    ] = 100,
    cursor: Annotated[
        str | None, typer.Option(help="Start after this cursor (printed under a full page).")
    ] = None,
    all_pages: Annotated[
        bool, typer.Option("--all-pages", help="Follow the cursors: every matching job.")
    ] = False,
    output: Output = ListFormat.table,
) -> None:
    """List your jobs (an admin: everyone's), oldest first, one page of ``--limit`` jobs.

    When more follow, the command says so on standard error with the cursor to pass back
    (``--cursor``); ``--all-pages`` fetches them all. ``-o json`` prints the page's jobs as
    a list."""
    rows, after = _pages(
        all=str(all).lower(),
        queue=queue,
        state=state,
        order="newest" if newest else "oldest",
        limit=limit,
        cursor=cursor,
        every=all_pages,
    )
    if output is ListFormat.json:
        print_json(rows)
    else:
        print_jobs(rows, wide=output is ListFormat.wide)
    if after is not None:
        err_console.print(
            f"more jobs follow: next cursor {after} (--cursor {after}, or --all-pages)",
            highlight=False,
        )


def _pages(every: bool, **params: Any) -> tuple[list[dict[str, Any]], str | None]:
    """The first page (``every``: all pages, in order) and the cursor after the last one
    fetched (None when nothing follows)."""
    rows: list[dict[str, Any]] = []
    with Client() as client, err_console.status("fetching jobs") as status:
        while True:
            page, after = client.page("/v1/jobs", **params)
            rows += page
            if not every or after is None:
                return rows, after
            status.update(f"fetching jobs: {len(rows):,} so far")
            params["cursor"] = after


def job(
    job_id: Annotated[str, typer.Argument(help=_REF_HELP)],
    output: Output = ListFormat.table,
) -> None:
    """Show one job with its tasks."""
    data = get(f"/v1/jobs/{job_id}")
    if output is ListFormat.json:
        print_json(data)
        return
    print_job(data)


def logs(
    job_id: Annotated[str, typer.Argument(help=_REF_HELP)],
    follow: Annotated[
        bool, typer.Option("-f", "--follow", help="Keep printing new output until the job ends.")
    ] = False,
    task: Annotated[int, typer.Option(help="Task index.")] = 0,
    stderr: Annotated[
        bool, typer.Option("--stderr", help="The task's standard error, not its standard output.")
    ] = False,
) -> None:
    """Print a task's output (``-f`` follows it until the job ends)."""
    offset = 0
    stream = "stderr" if stderr else "stdout"
    with Client() as client:
        while True:
            chunk = client.get(
                f"/v1/jobs/{job_id}/logs", task=task, stream=stream, offset=offset, limit=1 << 20
            )
            sys.stdout.write(chunk["data"])
            sys.stdout.flush()
            offset, job_id = chunk["offset"], chunk["id"]  # a name resolved once
            if not follow or (chunk["state"] in _TERMINAL and not chunk["data"]):
                return
            if not chunk["data"]:
                time.sleep(0.5)


def explanation_lines(explanation: dict[str, Any]) -> list[str]:
    """What is missing first (the reasons, then each rejection with its node count), then
    what preemption could or could not do, then what would fit: as the dashboard orders
    them, so the line under the headline says why no node fits."""
    reasons = explanation.get("reasons", [])
    later = [r for r in reasons if r.startswith("preemption: ")]
    lines = [f"  {r}" for r in reasons if r not in later]
    lines += [
        f"  - {r['reason']}: {plural(r['nodes'], 'node')}"
        for r in explanation.get("rejections", [])
    ]
    lines += [f"  {r}" for r in later]
    return lines + [f"  would fit now: {s}" for s in explanation.get("suggestions", [])]


def why(
    job_id: Annotated[str, typer.Argument(help=_REF_HELP)],
    output: Output = ListFormat.table,
) -> None:
    """Why a job is where it is: its pending explanation and its transition history."""
    data = get(f"/v1/jobs/{job_id}/why")
    if output is ListFormat.json:
        print_json(data)
        return
    explanation = data.get("explanation") if data["state"] == "pending" else None
    # the headline is the current reason: a pending job's explanation ("no node fits..."),
    # not the cause of its last transition ("submitted")
    headline = explanation["summary"] if explanation else data["reason"]
    named = f" ({data['name']})" if data.get("name") and data["name"] != data["id"] else ""
    console.print(
        f"[bold]{escape(data['id'])}[/bold]{escape(named)} is {data['state']}: {escape(headline)}",
        highlight=False,
        soft_wrap=True,
    )
    lines = _story_lines(data)
    lines += [f"{k}: {v}" for k, v in [*checkpoint_lines(data), *speed_lines(data.get("speed"))]]
    if explanation:
        lines += explanation_lines(explanation)
    for line in lines:
        # one line each however long (a path, a selector): a terminal wraps it, a pipe keeps it
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if data.get("counts"):
        console.print("[bold]count[/bold]")
        for c in data["counts"]:
            when = time.strftime("%H:%M:%S", time.localtime(c["time"]))
            console.print(f"  {when} {plural(c['count'], 'task')}", highlight=False)
    console.print("[bold]history[/bold]")
    for h in data["history"]:
        when = time.strftime("%H:%M:%S", time.localtime(h["time"]))
        console.print(
            f"  {when} {h['from'] or 'new'} -> {h['to']}: {h['cause']}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _story_lines(data: dict[str, Any]) -> list[str]:
    """The job that last preempted it and the device whose loss last displaced it."""
    lines = []
    by = data.get("preempted_by")
    if by:
        who = (
            f"{by['name']} ({by['user']}, priority {by['priority']})" if "name" in by else by["id"]
        )
        lines.append(
            f"preempted by {who} at {time.strftime('%H:%M:%S', time.localtime(by['time']))}"
        )
    lost = data.get("displaced_by")
    if lost:
        when = time.strftime("%H:%M:%S", time.localtime(lost["time"]))
        lines.append(f"displaced: device {lost['device']} {lost['reason']} at {when}")
    return lines
