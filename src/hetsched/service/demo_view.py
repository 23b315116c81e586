"""The demo's live view: a table that fits the terminal (its width and its height), with the
node each job runs on and a short reason, and one line per event worth seeing (a job
preempted by another, at which checkpoint).

Pure functions of the jobs as the API shows them, so they are tested without a service.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

__all__ = ["Events", "fit_rows", "node_cell", "short_reason", "view"]

#: lines the view takes besides the table's rows: title, header, its rule, the footer
_FRAME = 4
#: events shown under the table, the latest last
_EVENTS = 3
_PREEMPTED_BY = re.compile(r"preempted by (j[0-9a-f]+)")
_STYLE = {"running": "cyan", "succeeded": "green", "pending": "yellow"}
_ORDER = {"running": 0, "pending": 1}


def short_reason(job: dict[str, Any]) -> str:
    """A few words on where the job is: the first clause of its reason, preemption named."""
    state, reason = job["state"], str(job.get("reason") or "")
    if state == "succeeded":
        return "done" + (f" after {job['preemptions']} preemption" if job["preemptions"] else "")
    if state in ("failed", "cancelled", "rejected"):
        return reason.split(";")[0] or state
    if reason.startswith("preempted by"):
        return "preempted: saving a checkpoint" if state == "running" else "preempted"
    if reason.startswith("back in the queue"):
        return "requeued after preemption"
    if state == "running":
        return f"run {job['run']}, resumed" if job["run"] > 1 else f"run {job['run']}"
    return reason.split(";")[0].split(":")[0] or state


def node_cell(job: dict[str, Any]) -> str:
    """The node of the job's live tasks (``node+2``: and two more), ``-`` when none."""
    nodes: list[str] = sorted(
        {str(t["node"]) for t in job.get("tasks", []) if t.get("node") and t["state"] == "running"}
    )
    if not nodes:
        return "-"
    return nodes[0] + (f"+{len(nodes) - 1}" if len(nodes) > 1 else "")


def fit_rows(jobs: list[dict[str, Any]], room: int) -> tuple[list[dict[str, Any]], int]:
    """The jobs to show in ``room`` rows, in submission order: running and pending ones
    first, then the latest finished; and how many are left out."""
    if len(jobs) <= room:
        return jobs, 0
    ranked = sorted(range(len(jobs)), key=lambda i: (_ORDER.get(jobs[i]["state"], 2), -i))
    keep = sorted(ranked[: max(room, 0)])
    return [jobs[i] for i in keep], len(jobs) - len(keep)


@dataclass
class Events:
    """What happened that the table alone does not show: preemptions, by whom and where
    the victim's work was saved. ``seen`` feeds it the jobs at each poll."""

    lines: list[str] = field(default_factory=list)
    _preemptions: dict[str, int] = field(default_factory=dict)

    def count(self, job_id: str) -> int:
        """The preemptions of the job seen so far."""
        return self._preemptions.get(job_id, 0)

    def seen(self, jobs: list[dict[str, Any]], history: dict[str, list[str]]) -> None:
        """``history``: each job's transition causes (looked up for a preempted job)."""
        names = {j["id"]: j["name"] for j in jobs}
        for job in jobs:
            before = self._preemptions.get(job["id"], 0)
            self._preemptions[job["id"]] = job["preemptions"]
            if job["preemptions"] <= before:
                continue
            causes = history.get(job["id"], [])
            by = next((m.group(1) for c in reversed(causes) if (m := _PREEMPTED_BY.search(c))), "")
            who = names.get(by, by or "a job")
            step = (job.get("checkpoint") or {}).get("step")
            saved = f"at checkpoint step {step}" if step is not None else "(no checkpoint yet)"
            self.lines.append(f"{who} preempted {job['name']} {saved}")


def view(jobs: list[dict[str, Any]], events: Events, height: int, elapsed_s: float) -> Group:
    """The whole live view for a terminal ``height`` lines high."""
    shown_events = events.lines[-_EVENTS:]
    room = max(1, height - _FRAME - len(shown_events) - 1)
    rows, hidden = fit_rows(jobs, room)
    table = Table(
        title=f"hetsched demo: {elapsed_s:.0f}s",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    table.add_column("job", no_wrap=True)
    table.add_column("user", no_wrap=True)
    table.add_column("prio", justify="right", no_wrap=True)
    table.add_column("state", no_wrap=True, min_width=9)
    table.add_column("node", no_wrap=True)
    table.add_column("reason", no_wrap=True, overflow="ellipsis", ratio=1)
    for j in rows:
        color = _STYLE.get(j["state"], "red")
        table.add_row(
            j["name"],
            j["user"],
            str(j["priority"]),
            Text(j["state"], style=color),
            node_cell(j),
            short_reason(j),
        )
    done = sum(1 for j in jobs if j["state"] == "succeeded")
    footer = f"{done} of {len(jobs)} jobs done" + (f"; {hidden} not shown" if hidden else "")
    parts: list[Any] = [table, Text(footer, style="dim")]
    parts += [Text(f"» {line}", style="bold magenta") for line in shown_events]
    return Group(*parts)
