"""``hetsched checkpoint``: a task reports a checkpoint it saved; ``hetsched progress``:
a task reports the steps its job has done (docs/heterogeneity.md, "Learning speeds").

Run inside a task of ``hetsched up`` (``hetsched`` is on its PATH): it sends the task's own
key and token (``HETSCHED_TASK_KEY``, ``HETSCHED_TASK_TOKEN``) to the service that started
it (``HETSCHED_API``), never a user's token. The other way to report is to write
``{"step": N, "path": "..."}`` to ``$HETSCHED_CHECKPOINT_DIR/CHECKPOINT`` (a temporary
file, then a rename); docs/checkpointing.md has both.

Run inside a Kubernetes pod (``POD_NAME`` set from the downward API, and no task token),
it writes the ``hetsched.io/checkpointed`` annotation on its own pod with the pod's service
account (:mod:`hetsched.k8s.selfreport`).
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
from hetsched.k8s.selfreport import in_pod, own_pod, report_checkpoint
from hetsched.tls import TlsError, client_verify, explain

__all__ = ["checkpoint", "progress"]

#: the answers of a standby pair's standby (controlplane/api/standby.py)
_LEADER = "X-Hetsched-Leader"
_ROLE = "X-Hetsched-Role"
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

    The next run of the job, on any node, gets HETSCHED_RESUME_FROM (``--path``, else the
    checkpoint directory) and HETSCHED_RESUME_STEP (``--step``). A report made inside a notice
    (after the job's notice signal) ends the notice at once: the task is stopped without
    waiting out the rest of it.

    In a Kubernetes pod (POD_NAME and POD_NAMESPACE from the downward API), it writes the
    hetsched.io/checkpointed annotation on its own pod with the pod's service account
    (which needs get and patch on pods); the scheduler reads it the same way.
    """
    _survive_the_notice()
    missing = [name for name in _NEEDED if not os.environ.get(name)]
    if missing and in_pod(os.environ):
        _report_in_pod(step, path, output)
        return
    answer = _post("/v1/checkpoints", {"step": step, "path": path}, "checkpoint")
    if output is OutputFormat.json:
        print_json(answer.json())
        return
    console.print(f"checkpoint reported: step {step}" + (f", {path}" if path else ""))


def _report_in_pod(step: int, path: str, output: OutputFormat) -> None:
    """The report as an annotation on this pod (see the module docstring)."""
    from hetsched.k8s.api import ApiError, load_api  # the client loads only in a pod

    try:
        namespace, name = own_pod(os.environ)
    except ValueError as exc:
        fail(str(exc), 2)
    try:
        api = load_api()
    except Exception as exc:  # the client's config errors have no common base
        fail(f"cannot reach the Kubernetes API from this pod: {exc}", 1)
    try:
        written = report_checkpoint(api, namespace, name, step, path)
    except ApiError as exc:
        fail(f"checkpoint not written on pod {namespace}/{name}: {exc}", 1)
    finally:
        api.close()
    if output is OutputFormat.json:
        print_json(written)
        return
    where = f", {path}" if path else ""
    console.print(f"checkpoint reported on pod {namespace}/{name}: step {step}{where}")


def _post(route: str, fields: dict[str, object], what: str) -> httpx.Response:
    """Send a report of this task (its key and token) to the service that started it; fail
    with the service's reason unless it was accepted."""
    missing = [name for name in _NEEDED if not os.environ.get(name)]
    if missing:
        fail(
            f"{', '.join(missing)} not set: run this inside a task started by hetsched up"
            + (
                ", or in a Kubernetes pod with POD_NAME set (downward API)"
                if what == "checkpoint"
                else ""
            ),
            2,
        )
    body = {"task": os.environ["HETSCHED_TASK_KEY"], **fields}
    headers = {"Authorization": f"Bearer {os.environ['HETSCHED_TASK_TOKEN']}"}
    bases = [u.strip().rstrip("/") for u in os.environ["HETSCHED_API"].split(",") if u.strip()]
    answer = _send(bases, route, body, headers)
    if answer.status_code != 202:
        try:
            detail = answer.json().get("detail", answer.text)
        except ValueError:
            detail = answer.text
        fail(f"{what} not accepted ({answer.status_code}): {detail}", 1)
    return answer


def _send(
    bases: list[str], route: str, body: dict[str, object], headers: dict[str, str]
) -> httpx.Response:
    """POST ``body`` to the leader among ``bases`` (``HETSCHED_API``: the service's URL, or
    its standby pair's): each tried in turn when it cannot be reached, a standby's redirect
    followed to one of them, a standby's 503 waited out, for about 15 s in all (a
    failover); a refused certificate ends at once. An https URL is verified with the CA
    bundle the service gave (``HETSCHED_CA_PEM``)."""
    try:
        verify = client_verify()
    except TlsError as exc:
        fail(str(exc), 2)
    problem, attempt, hops = "", 0, 0
    while attempt < 8:
        redirected = False
        for base in list(bases):
            url = base + route
            try:
                answer = httpx.post(url, json=body, headers=headers, timeout=10.0, verify=verify)
            except httpx.TransportError as exc:
                tls = explain(exc, url)
                if tls is not None:
                    fail(tls, 1)
                problem = f"cannot reach {url}: {exc}"
                continue
            leader = answer.headers.get(_LEADER, "").rstrip("/")
            if answer.status_code == 307 and leader in bases and hops < 3:
                hops += 1
                bases.remove(leader)
                bases.insert(0, leader)  # asked first from now on
                redirected = True
                break
            if answer.status_code == 503 and answer.headers.get(_ROLE) == "standby":
                problem = f"{url} is a standby and no process leads yet"
                continue
            return answer
        if not redirected:
            time.sleep(0.25 * 2 ** min(attempt, 4))
            attempt += 1
    fail(problem, 1)


def progress(
    steps: Annotated[
        int, typer.Option(help="Steps (iterations) the job has done so far in this run.", min=0)
    ],
    output: Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")] = (
        OutputFormat.table
    ),
) -> None:
    """Report this job's progress to the service that runs it (hetsched up).

    ``--steps`` counts up within a run. The service measures the job's rate between two reports
    on the device model it runs on (the first report of a run only starts the clock) and
    keeps, per job type and model, a mean of those rates: later jobs of the type use it as
    their speed for placement when neither they nor the profile give one. The other way to
    report is to write {"steps": N} to $HETSCHED_PROGRESS_FILE (a temporary file, then a
    rename).
    """
    _survive_the_notice()
    answer = _post("/v1/progress", {"steps": steps}, "progress")
    if output is OutputFormat.json:
        print_json(answer.json())
        return
    console.print(f"progress reported: {steps} steps")
