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

#: ``queues``' columns: the jobs by state wrap between counts, never inside a state
_QUEUE_COLUMNS = (
    Col("queue", keep=True),
    Col("users", wrap=True, drop=1),
    Col("jobs", keep=True, wrap=True),
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


def queues(output: Output = OutputFormat.table) -> None:
    """Queues: who may submit, jobs by state, and quota used, borrowed and free."""
    rows = get("/v1/queues")
    if output is OutputFormat.json:
        print_json(rows)
        return
    grid = Grid(f"Queues ({len(rows)})", _QUEUE_COLUMNS)
    for q in rows:
        jobs = ", ".join(f"{n} {s}" for s, n in sorted(q["jobs"].items())) or "-"
        users = ", ".join(q["users"]) if q["users"] else "all"
        resources = q["resources"] or {"-": None}
        first = True
        for key, r in resources.items():
            cells = [q["name"], users, jobs] if first else ["", "", ""]
            if r is None:
                cells += ["-", "-", "-", "-", "-"]
            else:
                cells += [
                    key,
                    _amount(key, r["quota"]),
                    _amount(key, r["used"]),
                    _amount(key, r["borrowed"]),
                    _amount(key, r["free"]),
                ]
            grid.add(*cells)
            first = False
    print_table(grid)
