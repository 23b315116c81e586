"""``hetsched cancel``: one job, many, or those a filter chooses, in one atomic request."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from hetsched.cli.client import call
from hetsched.cli.job_text import plural
from hetsched.cli.output import OutputFormat, console, err_console, fail, print_json
from hetsched.model.workflow import split_element

__all__ = ["CONFIRM_ABOVE", "cancel", "confirm_needed"]

#: on a terminal, cancelling more jobs than this asks first (``--yes`` does not)
CONFIRM_ABOVE = 10


def confirm_needed(count: int, yes: bool, interactive: bool) -> bool:
    """Whether to ask before cancelling ``count`` jobs: on a terminal, above the threshold."""
    return interactive and not yes and count > CONFIRM_ABOVE


def cancel(
    jobs: Annotated[
        list[str] | None,
        typer.Argument(
            help="Jobs: ids, unique names or unique id prefixes; ID[7] for one element of an "
            "array (an array's id cancels every element).",
            show_default=False,
        ),
    ] = None,
    queue: Annotated[str | None, typer.Option(help="Every live job of this queue.")] = None,
    state: Annotated[
        str | None,
        typer.Option(help="Only jobs in these states: pending, running or pending,running."),
    ] = None,
    mine: Annotated[
        bool, typer.Option("--mine", help="Only your own jobs (an admin's filter: everyone's).")
    ] = False,
    user: Annotated[str | None, typer.Option(help="Only this user's jobs (admins).")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be cancelled; cancel nothing.")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help=f"Do not ask, even above {CONFIRM_ABOVE} jobs.")
    ] = False,
    output: Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")] = (
        OutputFormat.table
    ),
) -> None:
    """Cancel jobs: their tasks get SIGTERM, then SIGKILL after the grace period.

    Name the jobs (``cancel batch-embed j3f2``), or choose them with a filter (``cancel
    --queue team-a --state pending --mine``). One request cancels them all in one
    transaction: if any name is unknown or ambiguous, nothing is cancelled. On a terminal,
    more than 10 jobs are listed and confirmed first (``--yes`` skips it); ``--dry-run``
    only lists them.
    """
    # ``ID[7]``: one element of an array, cancelled on its own (created or not)
    elements = [j for j in jobs or () if split_element(j) is not None]
    if elements:
        _cancel_elements(elements, [j for j in jobs or () if j not in elements], dry_run)
        return
    body = _body(jobs, queue, state, mine, user)
    json_out = output is OutputFormat.json
    interactive = sys.stdin.isatty() and sys.stdout.isatty() and not json_out
    if not dry_run and interactive and not yes:
        preview = call("POST", "/v1/jobs/cancel", json={**body, "dry_run": True})
        count = len(preview["cancelled"])
        if confirm_needed(count, yes, interactive):
            _print(preview, dry=True)
            if not typer.confirm(f"Cancel these {plural(count, 'job')}?", default=False):
                fail("nothing was cancelled", 1)
            # exactly what was confirmed, not what the filter matches a moment later
            body = {"ids": [row["id"] for row in preview["cancelled"]]}
    answer = call("POST", "/v1/jobs/cancel", retries=2, json={**body, "dry_run": dry_run})
    if json_out:
        print_json(answer)
        return
    _print(answer, dry=dry_run)


def _cancel_elements(elements: list[str], others: list[str], dry_run: bool) -> None:
    """Array elements (``ID[7]``) one by one: each is its own request."""
    if others or dry_run:
        fail("array elements (ID[7]) are cancelled alone: no other jobs and no --dry-run")
    for ref in elements:
        call("POST", f"/v1/jobs/{ref}/cancel", retries=2)
        console.print(f"cancel requested for {ref}", highlight=False, markup=False)


def _body(
    jobs: list[str] | None, queue: str | None, state: str | None, mine: bool, user: str | None
) -> dict[str, Any]:
    filtered = queue is not None or state is not None or mine or user is not None
    if jobs and filtered:
        fail("name jobs or give a filter (--queue, --state, --mine, --user), not both")
    if jobs:
        return {"ids": list(jobs)}
    if not filtered:
        fail("name the jobs to cancel, or choose them with --queue, --state, --mine or --user")
    body: dict[str, Any] = {"mine": mine}
    if queue is not None:
        body["queue"] = queue
    if user is not None:
        body["user"] = user
    if state is not None:
        states = [s.strip() for s in state.split(",") if s.strip()]
        wrong = [s for s in states if s not in ("pending", "running")]
        if wrong or not states:
            fail(f"--state: {', '.join(wrong) or state!r}: expected pending, running or both")
        body["states"] = states
    return body


def _print(answer: dict[str, Any], dry: bool) -> None:
    """One line per job (the id whole, then its name and user), then the count."""
    rows, ended = answer["cancelled"], answer["already_ended"]
    for row in rows:
        console.print(
            f"{row['id']}  {row['name']}  {row['user']}  {row['state']}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    verb = "would cancel" if dry else "cancel requested for"
    console.print(f"{verb} {plural(len(rows), 'job')}", highlight=False)
    if ended:
        names = ", ".join(f"{r['id']} ({r['name']}, {r['state']})" for r in ended[:5])
        more = f" and {len(ended) - 5} more" if len(ended) > 5 else ""
        err_console.print(f"already ended: {names}{more}", highlight=False, soft_wrap=True)
