"""``hetsched submit | jobs | job | logs | cancel | why``: jobs through the API."""

from __future__ import annotations

import json
import sys
import time
import uuid
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from hetsched.cli.client import Client, call, get
from hetsched.cli.job_tables import print_job, print_jobs
from hetsched.cli.job_text import checkpoint_lines, plural, speed_lines
from hetsched.cli.output import console, err_console, fail, print_json
from hetsched.model.yamlio import YAMLError, safe_load

__all__ = [
    "cancel",
    "job",
    "jobs",
    "jobs_file",
    "load_submissions",
    "logs",
    "submit",
    "trailing_output",
    "why",
]

_TERMINAL = {"succeeded", "failed", "cancelled", "rejected"}


class ListFormat(StrEnum):
    table = "table"
    wide = "wide"
    json = "json"


Output = Annotated[ListFormat, typer.Option("-o", "--output", help="table, wide or json.")]


def load_submissions(path: Path) -> list[dict[str, Any]]:
    """Jobs from a file: ``jobs: [...]`` or a single job mapping (YAML or JSON). A relative
    ``workdir`` is relative to the file's folder (the service takes absolute ones only)."""
    try:
        data = safe_load(path.read_bytes())
    except (OSError, YAMLError) as exc:
        fail(f"{path}: {exc}")
    if isinstance(data, dict) and isinstance(data.get("jobs"), list):
        bodies = [dict(j) if isinstance(j, dict) else j for j in data["jobs"]]
    elif isinstance(data, dict):
        bodies = [data]
    else:
        fail(f"{path}: expected a job mapping or a 'jobs' list")
    for body in bodies:
        workdir = body.get("workdir") if isinstance(body, dict) else None
        if isinstance(workdir, str) and workdir and not workdir.startswith("/"):
            body["workdir"] = str((path.resolve().parent / workdir).resolve())
    return bodies


#: what one batch request carries at most (the service takes 5,000 jobs and 8 MiB)
_BATCH_JOBS = 5000
_BATCH_BYTES = 7 << 20


def _batches(bodies: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The bodies in order, cut into batches the service accepts."""
    out: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = 16
    for body in bodies:
        length = len(json.dumps(body)) + 2
        if current and (len(current) >= _BATCH_JOBS or size + length > _BATCH_BYTES):
            out.append(current)
            current, size = [], 16
        current.append(body)
        size += length
    if current:
        out.append(current)
    return out


def _post_batches(client: Client, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Submit jobs as batches (``POST /v1/jobs/batch``): each all or nothing, each with its
    own idempotency key kept across retries. A file past one batch's size goes in several;
    if one is refused, the ones before it stay submitted (said on stderr)."""
    created: list[dict[str, Any]] = []
    chunks = _batches(bodies)
    with Progress(
        TextColumn("submitting"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err_console,
        transient=True,
        disable=len(chunks) == 1,
    ) as progress:
        task = progress.add_task("jobs", total=len(bodies))
        for chunk in chunks:
            key = str(uuid.uuid4())
            try:
                answer = client.request(
                    "POST",
                    "/v1/jobs/batch",
                    retries=3,
                    json={"jobs": chunk},
                    headers={"Idempotency-Key": key},
                )
            except typer.Exit:
                if created:
                    err_console.print(
                        f"{len(created)} of {len(bodies)} jobs were submitted before this "
                        f"batch (jobs {len(created)} to {len(created) + len(chunk) - 1} of the "
                        "file, counting from 0) was refused",
                        highlight=False,
                    )
                raise
            created += answer["jobs"]
            progress.advance(task, len(chunk))
    return created


def _post_job(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    # the same key on every retry: a retried submit never creates a second job
    key = str(uuid.uuid4())
    result: dict[str, Any] = client.request(
        "POST", "/v1/jobs", retries=3, json=body, headers={"Idempotency-Key": key}
    )
    return result


#: what a job submitted as one command asks for (``submit``'s options; a jobs file says its own)
_Cpu = Annotated[str | None, typer.Option(help="CPU per task, e.g. 2 or 500m.")]
_Memory = Annotated[str | None, typer.Option(help="Memory per task, e.g. 4Gi.")]
_Gpu = Annotated[int, typer.Option(help="Whole GPUs per task.")]
_GpuShare = Annotated[int | None, typer.Option(help="A share of one GPU in 1/1000 (e.g. 300).")]
_GpuModel = Annotated[
    list[str] | None, typer.Option(help="Accept only these GPU models (repeatable).")
]
_Fpga = Annotated[int, typer.Option(help="FPGAs per task.")]
_Queue = Annotated[str, typer.Option(help="Queue to submit to.")]
_Name = Annotated[str | None, typer.Option(help="Job name.")]
_Priority = Annotated[int, typer.Option(help="Priority (higher runs first).")]
_Replicas = Annotated[int, typer.Option(help="Tasks (replicas) of the job.")]
_MinReplicas = Annotated[
    int | None,
    typer.Option(
        help="Elastic: start with any count from this to --replicas that fits, grow on idle "
        "capacity, shrink toward it instead of being preempted.",
        min=1,
    ),
]
_Resize = Annotated[
    str,
    typer.Option(
        help="How an elastic job changes its count: checkpoint (notice, then all tasks start "
        "again at the new count) or live (running tasks go on, ranks start or stop)."
    ),
]
_MaxRuntime = Annotated[str | None, typer.Option(help="Kill after, e.g. 30m.")]
_Env = Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE.")]
_Args = Annotated[
    list[str] | None,
    typer.Argument(help="A jobs file (YAML/JSON), or after `--` the command to run."),
]

#: the suffixes that make ``submit``'s first argument a jobs file
_JOB_FILES = frozenset({".yaml", ".yml", ".json"})


def jobs_file(items: list[str]) -> Path | None:
    """The jobs file among ``submit``'s arguments, or None: they are a command.

    ``submit`` parses with interspersed options off, so that a command's own flags stay its
    own; options written after a file therefore arrive here as arguments. A first argument
    with a jobs file's suffix is the file when it is alone (a missing file is then an error
    to report) or when it names an existing file, whatever follows it."""
    if not items or Path(items[0]).suffix not in _JOB_FILES:
        return None
    path = Path(items[0])
    return path if len(items) == 1 or path.is_file() else None


def trailing_output(rest: list[str], output: ListFormat) -> ListFormat:
    """``output`` as set by the options that follow a jobs file: only ``-o``/``--output``
    (in any of click's spellings) may; the other options describe a command job."""
    items = iter(rest)
    for item in items:
        if item in ("-o", "--output"):
            value = next(items, None)
            if value is None:
                fail(f"{item}: needs a value (table, wide or json)")
        elif item.startswith("--output="):
            value = item.removeprefix("--output=")
        elif item.startswith("-o") and not item.startswith("--"):
            value = item.removeprefix("-o")
        else:
            fail(f"{item}: after a jobs file only -o/--output may follow")
        try:
            output = ListFormat(value)
        except ValueError:
            fail(f"{item}: {value!r} is not one of table, wide, json")
    return output


def submit(
    args: _Args = None,
    cpu: _Cpu = None,
    memory: _Memory = None,
    gpu: _Gpu = 0,
    gpu_share: _GpuShare = None,
    gpu_model: _GpuModel = None,
    fpga: _Fpga = 0,
    queue: _Queue = "default",
    name: _Name = None,
    priority: _Priority = 0,
    replicas: _Replicas = 1,
    min_replicas: _MinReplicas = None,
    resize: _Resize = "checkpoint",
    max_runtime: _MaxRuntime = None,
    env: _Env = None,
    output: Output = ListFormat.table,
) -> None:
    """Submit a jobs file, or one command (after ``--``) as a job.

    A file of many jobs (``jobs: [...]``) is sent as one batch: every job is checked before
    any is stored, and a refusal lists each refused job by its index in the file. Files past
    5,000 jobs or 7 MiB go as several batches, each all or nothing.

    Examples:

        hetsched submit jobs.yaml
        hetsched submit --gpu 1 --max-runtime 2h -- python train.py --epochs 10
        hetsched submit --gpu 1 --replicas 8 --min-replicas 2 -- python train.py
    """
    items = list(args or [])
    path = jobs_file(items)
    if path is not None:
        output = trailing_output(items[1:], output)
        bodies = load_submissions(path)
    elif items:
        body: dict[str, Any] = {
            "name": name or Path(items[0]).name.replace(" ", "-")[:63] or "job",
            "queue": queue,
            "priority": priority,
            "replicas": replicas,
            "command": items,
            "resources": _command_resources(cpu, memory, gpu, gpu_share, gpu_model, fpga),
        }
        if min_replicas is not None:
            body.update(min_replicas=min_replicas, resize=resize)
        if max_runtime:
            body["max_runtime"] = max_runtime
        if env:
            body["env"] = dict(e.split("=", 1) for e in env if "=" in e)
        bodies = [body]
    else:
        fail("give a jobs file, or a command after `--`")
    _send(bodies, output)


def _send(bodies: list[dict[str, Any]], output: ListFormat) -> None:
    """Post the jobs (one job alone; a file of many as batches: all its jobs, or none, per
    request) and say what was created."""
    with Client() as client:
        if len(bodies) == 1:
            created = [_post_job(client, bodies[0])]
        else:
            created = _post_batches(client, bodies)
    if output is ListFormat.json:
        print_json(created)
        return
    for item in created:
        console.print(
            f"submitted [bold]{item['id']}[/bold] ({item['name']}, queue {item['queue']})",
            highlight=False,
        )


def _command_resources(
    cpu: str | None,
    memory: str | None,
    gpu: int,
    gpu_share: int | None,
    gpu_model: list[str] | None,
    fpga: int,
) -> dict[str, Any]:
    """The ``resources`` of a job submitted as one command, from ``submit``'s options."""
    resources: dict[str, Any] = {"cpu": cpu or "1", "memory": memory or "1Gi"}
    devices: list[dict[str, Any]] = []
    if gpu or gpu_share:
        choice: dict[str, Any] = {"class": "gpu", "count": max(gpu, 1)}
        if gpu_share:
            choice["share"] = gpu_share
        if gpu_model:
            choice["model"] = list(gpu_model)
        devices.append(choice)
    if fpga:
        devices.append({"class": "fpga", "count": fpga})
        resources["tolerations"] = [{"key": "dedicated"}]
    if devices:
        resources["devices"] = devices
    return resources


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
    job_id: Annotated[str, typer.Argument(help="Job id.")],
    output: Output = ListFormat.table,
) -> None:
    """Show one job with its tasks."""
    data = get(f"/v1/jobs/{job_id}")
    if output is ListFormat.json:
        print_json(data)
        return
    print_job(data)


def logs(
    job_id: Annotated[str, typer.Argument(help="Job id.")],
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
            offset = chunk["offset"]
            if not follow or (chunk["state"] in _TERMINAL and not chunk["data"]):
                return
            if not chunk["data"]:
                time.sleep(0.5)


def cancel(job_id: Annotated[str, typer.Argument(help="Job id.")]) -> None:
    """Cancel a job: its tasks get SIGTERM, then SIGKILL after the grace period."""
    call("POST", f"/v1/jobs/{job_id}/cancel", retries=2)
    console.print(f"cancel requested for {job_id}", highlight=False)


def why(
    job_id: Annotated[str, typer.Argument(help="Job id.")],
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
    console.print(
        f"[bold]{escape(job_id)}[/bold] is {data['state']}: {escape(headline)}",
        highlight=False,
        soft_wrap=True,
    )
    lines = [f"{k}: {v}" for k, v in [*checkpoint_lines(data), *speed_lines(data.get("speed"))]]
    if explanation:
        lines += [f"  {line}" for line in explanation.get("reasons", [])]
        lines += [
            f"  - {r['reason']}: {plural(r['nodes'], 'node')}"
            for r in explanation.get("rejections", [])
        ]
        lines += [f"  would fit now: {s}" for s in explanation.get("suggestions", [])]
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
