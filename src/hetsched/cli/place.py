"""``hetsched place``: one scheduling pass of a job list over a cluster, printed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from hetsched.cli import output as out
from hetsched.cli.job_text import plural
from hetsched.cli.jobfile import load_job_file
from hetsched.cli.output import INVALID_INPUT, OutputFormat, err_console, fail, print_json
from hetsched.cli.parser_cache import load_cel_parser
from hetsched.cli.tables import Col, Grid, print_table
from hetsched.cluster.network import domains_of
from hetsched.cluster.state import ClusterState
from hetsched.cluster.stranding import stranded_accelerators
from hetsched.framework.profile import ProfileError, load_profile
from hetsched.framework.speeds import load_speed_table
from hetsched.model.quantity import format_cpu, format_memory
from hetsched.model.selector import set_parser_source
from hetsched.model.specs import SpecError, load_cluster_levels
from hetsched.model.yamlio import gc_paused
from hetsched.plugins.stranding import profile_typicals
from hetsched.scheduler import Action, Bind, JobSubmitted, Pending, Reject, Scheduler

__all__ = ["place", "place_jobs"]


def place_jobs(cluster: Path, jobs: Path, profile: Path | None) -> dict[str, Any]:
    """Place ``jobs`` on ``cluster`` in one pass; the JSON document ``place -o json`` prints."""
    set_parser_source(load_cel_parser)  # a short run: the CEL parser's tables from the cache
    # a one-shot pass whose objects all live to the end: collecting cycles meanwhile would
    # only walk them again and again (a third of the run for 5,000 jobs on 5,000 nodes),
    # and so would building the result, with everything before still alive
    with gc_paused():
        nodes, levels = load_cluster_levels(cluster)
        job_file = load_job_file(jobs)
        job_list = job_file.build()
        spec = load_profile(profile)
        state = ClusterState(nodes)
        if levels:
            state.set_topology(levels)
        scheduler = Scheduler(state, spec)
        scheduler.speed_table = load_speed_table(spec.speeds)
        actions = scheduler.handle([JobSubmitted(j) for j in job_list], now=0.0)
        stranded = stranded_accelerators(state, profile_typicals(spec))
        return {**_result(actions, stranded.to_dict(), state), "ignored": job_file.notes()}


def _result(actions: list[Action], stranded: dict[str, Any], state: ClusterState) -> dict[str, Any]:
    placements: list[dict[str, Any]] = []
    # a job's last reason, in the order jobs first waited (one that waits for another job
    # is told again when that one starts)
    pending: dict[str, dict[str, Any]] = {}
    for action in actions:
        if isinstance(action, Bind):
            for task, p in action.placements:
                placement = {"job": action.job_id, "task": task, **p.to_dict()}
                if state.levels:
                    placement["domains"] = domains_of(state, p.node)
                placements.append(placement)
        elif isinstance(action, Pending):
            pending[action.job_id] = {
                "job": action.job_id,
                "reasons": action.explanation.lines(),
                "explanation": action.explanation.to_dict(),
            }
        elif isinstance(action, Reject):
            pending[action.job_id] = {"job": action.job_id, "reasons": [action.reason]}
    return {"placements": placements, "pending": list(pending.values()), "stranded": stranded}


def _devices_cell(node: str, devices: list[dict[str, Any]]) -> str:
    """``gpu0-7`` for whole devices in a run, ``gpu0 (300/1000)`` for shares."""
    names = [str(d["id"]).removeprefix(f"{node}/") for d in devices]
    if any(d["share"] < 1000 for d in devices):
        return ", ".join(f"{n} ({d['share']}/1000)" for n, d in zip(names, devices, strict=True))
    runs: list[list[str]] = []
    for name in names:
        stem, digits = name.rstrip("0123456789"), name[len(name.rstrip("0123456789")) :]
        last = runs[-1] if runs else None
        if (
            last is not None
            and digits
            and last[0] == stem
            and last[2].isdigit()
            and int(digits) == int(last[2]) + 1
        ):
            last[2] = digits
        else:
            runs.append([stem, digits, digits])
    return ", ".join(f"{stem}{a}" if a == b else f"{stem}{a}-{b}" for stem, a, b in runs) or "-"


def place(
    cluster: Annotated[Path, typer.Option(help="Cluster YAML: nodes and their devices.")],
    jobs: Annotated[Path, typer.Option(help="Jobs YAML: the jobs to place, in order.")],
    profile: Annotated[
        Path | None, typer.Option(help="Profile YAML: plugins per extension point.")
    ] = None,
    output: Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")] = (
        OutputFormat.table
    ),
) -> None:
    """Place jobs on a cluster in one scheduling pass and show where each task goes.

    Jobs are tried in queue order (the profile's queue_sort, FIFO by default). A job whose
    tasks do not all fit (its gang minimum) is listed as pending with the reasons: how many
    nodes each filter rejected and why, and what would fit now. The jobs file may be one
    ``submit`` takes: what a job runs (``command``, ``env``, ``workdir``) is ignored here,
    and a note on standard error says so (``ignored`` in ``-o json``).
    """
    try:
        result = place_jobs(cluster, jobs, profile)
    except (SpecError, ProfileError) as exc:
        fail(str(exc), INVALID_INPUT)
    if output is OutputFormat.json:
        print_json(result)
        return
    for note in result["ignored"]:
        err_console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    _print_table(result)


#: the placements' columns: a job, its node and its device ids whole
_COLUMNS = (
    Col("job", keep=True),
    Col("task", keep=True, right=True),
    Col("node", keep=True),
    Col("cpu", drop=1, right=True),
    Col("memory", drop=2, right=True),
    Col("devices", keep=True, wrap=True),
)


def _print_table(result: dict[str, Any]) -> None:
    console = out.console
    tasks = len(result["placements"])
    # with network levels, each task's domains (broadest first) after its node
    domains = any("domains" in p for p in result["placements"])
    columns = (*_COLUMNS[:3], Col("domain", drop=3), *_COLUMNS[3:]) if domains else _COLUMNS
    grid = Grid(f"Placements ({plural(tasks, 'task')})", columns)
    for p in result["placements"]:
        devices = _devices_cell(p["node"], p["devices"])
        where = ["/".join(p["domains"].values())] if domains else []
        grid.add(
            p["job"],
            str(p["task"]),
            p["node"],
            *where,
            format_cpu(p["cpu_milli"]),
            format_memory(p["memory_mib"]),
            devices or "-",
        )
    print_table(grid)
    stranded = result["stranded"]
    line = (
        f"stranded accelerators: {stranded['stranded']} of {stranded['accelerators']} "
        f"({stranded['percent']:.1f}%)"
    )
    if stranded["by_node"]:
        line += " (" + ", ".join(f"{n}: {c}" for n, c in stranded["by_node"].items()) + ")"
    console.print(line, highlight=False, soft_wrap=True)
    if result["pending"]:
        console.print(f"\n[bold]Pending ({plural(len(result['pending']), 'job')})[/bold]")
        for item in result["pending"]:
            console.print(item["job"], style="yellow", highlight=False, markup=False)
            for reason in item["reasons"]:
                # a reason is one line however long: a terminal wraps it, a pipe keeps it
                console.print(f"  {reason}", highlight=False, markup=False, soft_wrap=True)
