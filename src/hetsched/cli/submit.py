"""``hetsched submit``: a jobs file as batches (each all or nothing), or one command as a job."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from hetsched.cli.client import Client
from hetsched.cli.jobs import ListFormat, Output
from hetsched.cli.output import INVALID_INPUT, console, err_console, fail, print_json

__all__ = ["jobs_file", "load_submissions", "submit", "trailing_output"]


def load_submissions(path: Path) -> list[dict[str, Any]]:
    """Jobs from a file: ``jobs: [...]`` or a single job mapping (YAML or JSON). A relative
    ``workdir`` is relative to the file's folder (the service takes absolute ones only)."""
    from hetsched.cli.jobfile import resolve_workdirs  # the job models, only for a file
    from hetsched.model.spec_common import SpecError, load_yaml

    try:
        data = load_yaml(path)
    except SpecError as exc:
        fail(str(exc), INVALID_INPUT)
    if isinstance(data, dict) and isinstance(data.get("jobs"), list):
        bodies = [dict(j) if isinstance(j, dict) else j for j in data["jobs"]]
    elif isinstance(data, dict):
        bodies = [data]
    else:
        fail(f"{path}: expected a job mapping or a 'jobs' list", INVALID_INPUT)
    unread = sorted(str(k) for k in data if k != "jobs") if "jobs" in data else []
    for key in unread:
        err_console.print(f"{key}: not read (submit reads the jobs under 'jobs')", highlight=False)
    return resolve_workdirs(bodies, path.parent)


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
_After = Annotated[
    list[str] | None,
    typer.Option(
        help="Wait for this job (name or id) to succeed; NAME:failed or NAME:ended waits "
        "for that end instead (repeatable)."
    ),
]
_Array = Annotated[
    str | None,
    typer.Option(
        help="Run an array: indexes in Slurm's syntax (0-99, 1-7:2, 0,3,5), %N caps how "
        "many run at once (0-999%50). Each element gets HETSCHED_ARRAY_INDEX."
    ),
]
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
                fail(f"{item}: needs a value (table, wide or json)", INVALID_INPUT)
        elif item.startswith("--output="):
            value = item.removeprefix("--output=")
        elif item.startswith("-o") and not item.startswith("--"):
            value = item.removeprefix("-o")
        else:
            fail(f"{item}: after a jobs file only -o/--output may follow", INVALID_INPUT)
        try:
            output = ListFormat(value)
        except ValueError:
            fail(f"{item}: {value!r} is not one of table, wide, json", INVALID_INPUT)
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
    after: _After = None,
    array: _Array = None,
    output: Output = ListFormat.table,
) -> None:
    """Submit a jobs file, or one command (after ``--``) as a job.

    A file of many jobs (``jobs: [...]``) is sent as one batch: every job is checked before
    any is stored, and a refusal lists each refused job by its index in the file. Files past
    5,000 jobs or 7 MiB go as several batches, each all or nothing.

    Examples:

        hetsched submit jobs.yaml
        hetsched submit --gpu 1 --max-runtime 2h -- python train.py --epochs 10
        hetsched submit --array 0-499%50 --gpu 1 -- python sweep.py
        hetsched submit --after preprocess --after eval:failed -- python report.py
        hetsched submit --gpu 1 --replicas 8 --min-replicas 2 -- python train.py

    In a file, ``after: [preprocess, {job: eval, state: failed}]``, ``on_unmet: keep``
    and ``array: "0-499%50"`` say the same; names resolve within the file first, then to
    your latest job of that name, and a cycle is refused before anything is stored.
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
        body.update(_options(max_runtime, array, env, after, min_replicas, resize))
        bodies = [body]
    else:
        fail("give a jobs file, or a command after `--`", INVALID_INPUT)
    _send(bodies, output)


def _options(
    max_runtime: str | None,
    array: str | None,
    env: list[str] | None,
    after: list[str] | None,
    min_replicas: int | None,
    resize: str,
) -> dict[str, Any]:
    """The submission's optional fields that the flags set (none left empty)."""
    extra: dict[str, Any] = {
        "max_runtime": max_runtime,
        "array": array,
        "env": dict(e.split("=", 1) for e in env or () if "=" in e),
        "after": [_after_entry(a) for a in after or ()],
    }
    if min_replicas is not None:
        extra.update(min_replicas=min_replicas, resize=resize)
    return {k: v for k, v in extra.items() if v}


def _after_entry(text: str) -> dict[str, str]:
    """``--after NAME`` or ``NAME:STATE`` as an ``after`` entry."""
    job, _, state = text.rpartition(":") if ":" in text else (text, "", "")
    if state and state not in ("succeeded", "failed", "ended"):
        fail(
            f"--after {text}: the state is succeeded, failed or ended, got {state!r}",
            INVALID_INPUT,
        )
    return {"job": job, "state": state or "succeeded"}


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
