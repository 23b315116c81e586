"""``hetsched nodes`` and ``hetsched queues``."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

import typer

from hetsched.cli.client import get
from hetsched.cli.output import OutputFormat, print_json
from hetsched.cli.tables import Col, Grid, print_table
from hetsched.model.quantity import format_cpu, format_memory

__all__ = ["nodes", "queues"]

Output = Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")]


def _devices(devices: list[dict[str, Any]]) -> str:
    total: Counter[str] = Counter()
    free: Counter[str] = Counter()
    for d in devices:
        label = f"{d['class']} {d['model']}".strip()
        total[label] += 1
        free[label] += d["free_share"] / 1000
    return ", ".join(f"{n}x {label} ({free[label]:g} free)" for label, n in total.items()) or "-"


#: ``nodes``' columns: a node's name whole, its devices wrapped between entries
_NODE_COLUMNS = (
    Col("node", keep=True),
    Col("cpu free/total", keep=True),
    Col("memory free/total", keep=True),
    Col("devices", keep=True, wrap=True),
)

#: ``queues``' columns: a queue's jobs by state, one state a line, never cut
_QUEUE_COLUMNS = (
    Col("queue", keep=True),
    Col("users", wrap=True, drop=1),
    Col("jobs", keep=True),
    Col("resource", keep=True),
    Col("quota", drop=3, right=True),
    Col("used", keep=True, right=True),
    Col("borrowed", drop=2, right=True),
    Col("free", keep=True, right=True),
)


def nodes(output: Output = OutputFormat.table) -> None:
    """Nodes with their free and total CPU, memory and devices."""
    rows = get("/v1/nodes")
    if output is OutputFormat.json:
        print_json(rows)
        return
    grid = Grid(f"Nodes ({len(rows)})", _NODE_COLUMNS)
    for n in rows:
        member = n.get("member")  # a federation's member: its state says more
        state = member["state"] if member else ("" if n["active"] else "inactive")
        grid.add(
            n["name"] + (f" ({state})" if state else ""),
            f"{format_cpu(n['cpu_free_milli'])}/{format_cpu(n['cpu_milli'])}",
            f"{format_memory(n['memory_free_mib'])}/{format_memory(n['memory_mib'])}",
            _devices(n["devices"]),
        )
    print_table(grid)


def _amount(key: str, value: float | None) -> str:
    if value is None:
        return "-"
    if key == "cpu":
        return format_cpu(int(value))
    if key == "memory":
        return format_memory(int(value))
    return f"{value:g}"


def _quota_cells(key: str, r: dict[str, Any]) -> list[str]:
    """A queue's line for one resource: its name, quota, used, borrowed and free."""
    amounts = (r["quota"], r["used"], r["borrowed"], r["free"])
    return [key, *(_amount(key, value) for value in amounts)]


def queues(output: Output = OutputFormat.table) -> None:
    """Queues: who may submit, jobs by state, and quota used, borrowed and free."""
    rows = get("/v1/queues")
    if output is OutputFormat.json:
        print_json(rows)
        return
    grid = Grid(f"Queues ({len(rows)})", _QUEUE_COLUMNS)
    for q in rows:
        # one line per state and per resource: a count stays beside its state
        jobs = [f"{n} {s}" for s, n in sorted(q["jobs"].items())] or ["-"]
        users = ", ".join(q["users"]) if q["users"] else "all"
        resources = [_quota_cells(key, r) for key, r in q["resources"].items()] or [["-"] * 5]
        for line in range(max(len(jobs), len(resources))):
            head = [q["name"], users] if line == 0 else ["", ""]
            state = [jobs[line] if line < len(jobs) else ""]
            grid.add(*head, *state, *(resources[line] if line < len(resources) else [""] * 5))
    print_table(grid)
