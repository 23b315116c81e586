"""How ``hetsched jobs`` and ``hetsched job`` print: the job list and one job with its tasks,
as tables fitted to the terminal (cli/tables.py) in which no id or state is ever cut."""

from __future__ import annotations

import time
from typing import Any

from hetsched.cli import output
from hetsched.cli.job_text import age, checkpoint_lines, plural, resources_text, workflow_lines
from hetsched.cli.tables import Col, Grid, print_table

__all__ = ["current_reason", "print_job", "print_jobs"]

#: ``jobs``' columns: ids, names and states whole; the counters go first when room is short
_JOB_COLUMNS = (
    Col("id", keep=True),
    Col("name", keep=True),
    Col("user", drop=3),
    Col("queue", drop=4),
    Col("prio", drop=2, right=True),
    Col("state", keep=True),
    Col("age", drop=1, right=True),
)
_WIDE_COLUMNS = (
    Col("run", right=True),
    Col("tasks", right=True),
    Col("restarts", right=True),
    Col("preempted", right=True),
    Col("resources", wrap=True, drop=1),
    Col("reason", wrap=True, drop=5),
)


#: ``jobs``' column of the network domains a running job's tasks hold (with levels only)
_DOMAINS_COLUMN = Col("domains", wrap=True, drop=1)


def print_jobs(rows: list[dict[str, Any]], wide: bool) -> None:
    """``jobs``' table (``wide``: with the counters, resources and reason), with the domains
    of the running jobs' tasks when the service has network levels."""
    now = time.time()
    domains = any("domains" in r for r in rows)
    columns = _JOB_COLUMNS + ((_DOMAINS_COLUMN,) if domains else ())
    grid = Grid(f"Jobs ({len(rows)})", columns + (_WIDE_COLUMNS if wide else ()))
    for r in rows:
        cells = [
            r["id"],
            r["name"],
            r["user"],
            r["queue"],
            str(r["priority"]),
            r["state"],
            age(r["submitted_at"], now),
        ]
        if domains:
            cells.append(_domains_text([{"domains": d} for d in r.get("domains", ())]) or "-")
        if wide:
            cells += [
                str(r["run"]),
                tasks_text(r),
                str(r["restarts"]),
                str(r["preemptions"]),
                resources_text(r["resources"]),
                current_reason(r),
            ]
        grid.add(*cells)
    print_table(grid)


def tasks_text(job: dict[str, Any]) -> str:
    """``jobs -o wide``'s tasks: the job's count (``replicas``); an elastic job's count now
    and its bounds, ``3 of 2-8`` (``-`` for the count while it does not run)."""
    if job.get("min_replicas") is None:
        return str(job["replicas"])
    now = "-" if job.get("count") is None else str(job["count"])
    return f"{now} of {job['min_replicas']}-{job['replicas']}"


def current_reason(job: dict[str, Any]) -> str:
    """Why the job is where it is now: a pending job's explanation ("no node fits ..."),
    not the cause of its last transition ("submitted")."""
    return str(job.get("pending_reason") or job["reason"])


def print_job(data: dict[str, Any]) -> None:
    """``job``: its fields, one a line, then its tasks."""
    for key in ("id", "name", "user", "queue", "priority", "state", "reason", "run", "restarts"):
        _field(key, current_reason(data) if key == "reason" else str(data[key]))
    for key, value in checkpoint_lines(data):
        _field(key, value)
    _field("command", " ".join(data["command"]))
    _field("resources", resources_text(data["resources"]))
    for key, value in workflow_lines(data):
        _field(key, value)
    if data.get("min_replicas") is not None:
        now = "-" if data.get("count") is None else str(data["count"])
        bounds = f"{data['min_replicas']} to {data['replicas']}"
        _field("count", f"{now} (elastic, {bounds}, resized by {data.get('resize')})")
    for group in data.get("groups", ()):
        each = resources_text(group["resources"])
        _field("group", f"{group['name']}: {group['replicas']} x {each}")
    domains = _domains_text(data.get("tasks", []))
    if domains:
        _field("domains", domains)
    grid = Grid("Tasks", _TASK_COLUMNS)
    for t in data.get("tasks", []):
        devices = ", ".join(
            d["id"] + ("" if d["share"] >= 1000 else f" ({d['share']}/1000)") for d in t["devices"]
        )
        grid.add(
            str(t["task"]),
            str(t["run"]),
            t["node"],
            t["state"],
            str(t["pid"] or "-"),
            devices or "-",
            "-" if t["exit_code"] is None else str(t["exit_code"]),
            t["reason"],
        )
    print_table(grid)


#: ``job``'s task columns: node, state and every device id whole
_TASK_COLUMNS = (
    Col("task", keep=True, right=True),
    Col("run", drop=1, right=True),
    Col("node", keep=True),
    Col("state", keep=True),
    Col("pid", drop=2, right=True),
    Col("devices", keep=True, wrap=True),
    Col("exit", drop=3, right=True),
    Col("reason", wrap=True, drop=4),
)


def _domains_text(tasks: list[dict[str, Any]]) -> str:
    """``b1/r2: 3 tasks, b1/r3: 1 task``: the network domains the tasks got (broadest level
    first), in task order; empty without levels."""
    counts: dict[str, int] = {}
    for task in tasks:
        if task.get("domains"):
            path = "/".join(task["domains"].values())
            counts[path] = counts.get(path, 0) + 1
    return ", ".join(f"{path}: {plural(n, 'task')}" for path, n in counts.items())


def _field(key: str, value: str) -> None:
    """One ``key  value`` line of ``job``: never broken inside (a long command or path
    runs on, and a terminal wraps it where it must)."""
    console = output.console  # looked up now: a test may give the module another console
    console.print(f"[bold]{key:>10}[/bold]  ", end="", highlight=False)
    console.print(value, markup=False, highlight=False, soft_wrap=True)
