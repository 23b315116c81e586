"""``hetsched nodes`` and ``hetsched queues``."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

import typer
from rich.table import Table

from hetsched.cli.client import get
from hetsched.cli.output import OutputFormat, console, print_json
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


def nodes(output: Output = OutputFormat.table) -> None:
    """Nodes with their free and total CPU, memory and devices."""
    rows = get("/v1/nodes")
    if output is OutputFormat.json:
        print_json(rows)
        return
    table = Table(title=f"Nodes ({len(rows)})", title_justify="left")
    for column in ("node", "cpu free/total", "memory free/total", "devices"):
        table.add_column(column)
    for n in rows:
        member = n.get("member")  # a federation's member: its state says more
        state = member["state"] if member else ("" if n["active"] else "inactive")
        table.add_row(
            n["name"] + (f" ({state})" if state else ""),
            f"{format_cpu(n['cpu_free_milli'])}/{format_cpu(n['cpu_milli'])}",
            f"{format_memory(n['memory_free_mib'])}/{format_memory(n['memory_mib'])}",
            _devices(n["devices"]),
        )
    console.print(table)


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
    table = Table(title=f"Queues ({len(rows)})", title_justify="left")
    for column in ("queue", "users", "jobs", "resource", "quota", "used", "borrowed", "free"):
        table.add_column(column)
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
            table.add_row(*cells)
            first = False
    console.print(table)
