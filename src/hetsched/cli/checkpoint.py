"""``hetsched checkpoint``: a task reports a checkpoint it saved.

Run inside a task of ``hetsched up`` (``hetsched`` is on its PATH): it sends the task's own
key and token (``HETSCHED_TASK_KEY``, ``HETSCHED_TASK_TOKEN``) to the service that started
it (``HETSCHED_API``), never a user's token. The other way to report is to write
``{"step": N, "path": "..."}`` to ``$HETSCHED_CHECKPOINT_DIR/CHECKPOINT`` (a temporary
file, then a rename); docs/checkpointing.md has both.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Annotated

import httpx
import typer

from hetsched.cli.output import OutputFormat, console, fail, print_json

__all__ = ["checkpoint"]

_NEEDED = ("HETSCHED_API", "HETSCHED_TASK_KEY", "HETSCHED_TASK_TOKEN")


def _survive_the_notice() -> None:
    """Ignore the job's notice signal: it goes to the task's whole process group, and a
    report made just as the notice comes must still get through (a task that calls this
    command closes the remaining window by blocking the signal around the call, as the
    example does)."""
    name = os.environ.get("HETSCHED_NOTICE_SIGNAL", "SIGUSR1")
    with contextlib.suppress(KeyError, ValueError, OSError):
        signal.signal(signal.Signals[name], signal.SIG_IGN)


def checkpoint(
    step: Annotated[int, typer.Option(help="The step (iteration) the saved state reached.", min=0)],
    path: Annotated[
        str, typer.Option(help="Where the state was saved (told to the next run).")
    ] = "",
    output: Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")] = (
        OutputFormat.table
    ),
) -> None:
    """Report a checkpoint of this task to the service that runs it.

    The next run of the job, on any node, gets HETSCHED_RESUME_FROM (PATH, else the
    checkpoint directory) and HETSCHED_RESUME_STEP (STEP). A report made inside a notice
    (after the job's notice signal) ends the notice at once: the task is stopped without
    waiting out the rest of it.
    """
    _survive_the_notice()
    missing = [name for name in _NEEDED if not os.environ.get(name)]
    if missing:
        fail(
            f"{', '.join(missing)} not set: run this inside a task started by hetsched up",
            2,
        )
    body = {"task": os.environ["HETSCHED_TASK_KEY"], "step": step, "path": path}
    headers = {"Authorization": f"Bearer {os.environ['HETSCHED_TASK_TOKEN']}"}
    url = os.environ["HETSCHED_API"].rstrip("/") + "/v1/checkpoints"
    answer = None
    for attempt in range(4):
        try:
            answer = httpx.post(url, json=body, headers=headers, timeout=10.0)
            break
        except httpx.TransportError as exc:
            if attempt == 3:
                fail(f"cannot reach {url}: {exc}", 1)
            time.sleep(0.25 * 2**attempt)
    assert answer is not None
    if answer.status_code != 202:
        try:
            detail = answer.json().get("detail", answer.text)
        except ValueError:
            detail = answer.text
        fail(f"checkpoint not accepted ({answer.status_code}): {detail}", 1)
    if output is OutputFormat.json:
        print_json(answer.json())
        return
    console.print(f"checkpoint reported: step {step}" + (f", {path}" if path else ""))
