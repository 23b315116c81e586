"""Reports of replays: a rich table, a stable JSON document, and a folder with plots.

``write_report(out, replays, meta)`` writes ``report.md``, ``summary.json``, ``jobs.csv``
and three PNG plots (matplotlib's Agg backend, no display needed): utilization over time,
queue length over time, and the wait-time distribution per queue. Several replays of the
same workload (one per policy) go side by side in every file.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from hetsched.sim.engine import TimeSeries
from hetsched.sim.metrics import JOB_COLUMNS, job_rows
from hetsched.sim.replay import Replay

__all__ = ["comparison_rows", "downsample", "render", "report_document", "write_report"]

#: samples kept per series in JSON and plots
SERIES_POINTS = 400


def _hours(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.2f}h"


def downsample(series: TimeSeries, points: int = SERIES_POINTS) -> dict[str, Any]:
    """The series at up to ``points`` evenly spaced times (the last sample at or before
    each), with utilization as fractions of capacity."""
    times = np.asarray(series.time, dtype=np.float64)
    if times.size == 0:
        return {"time": [], "queued": [], "running": [], "utilization": {}, "stranded": []}
    grid = np.linspace(times[0], times[-1], min(points, times.size))
    index = np.clip(np.searchsorted(times, grid, side="right") - 1, 0, times.size - 1)
    util: dict[str, list[float]] = {}
    for label, used in series.used.items():
        use = np.asarray(used, dtype=np.float64)[index]
        cap = np.asarray(series.capacity[label], dtype=np.float64)[index]
        ratio = np.divide(use, cap, out=np.zeros_like(use), where=cap > 0)
        util[label] = [round(float(v), 4) for v in ratio]
    return {
        "time": [round(float(t), 3) for t in grid],
        "queued": [int(series.queued[i]) for i in index],
        "running": [int(series.running[i]) for i in index],
        "utilization": util,
        "stranded": [round(float(series.stranded[i]), 4) for i in index]
        if len(series.stranded) == times.size
        else [],
    }


def report_document(
    replays: Sequence[Replay], meta: dict[str, Any], jobs: bool = True, stream: bool = False
) -> dict[str, Any]:
    """The JSON document ``-o json`` prints and ``summary.json`` holds (without jobs).

    With ``stream``, each replay's ``jobs`` is an iterator of its per-job rows, built as
    they are read (a writer that streams iterators prints them without holding them all).
    """
    documents = []
    for r in replays:
        document = r.to_dict(jobs=jobs and not stream)
        if jobs and stream:
            document["jobs"] = job_rows(r.result.jobs)
        documents.append({**document, "series": downsample(r.result.series)})
    return {**meta, "replays": documents}


def comparison_rows(replays: Sequence[Replay]) -> list[tuple[str, list[str]]]:
    """(metric, one cell per replay) rows of the side-by-side table."""
    rows: list[tuple[str, list[str]]] = []

    def add(label: str, cells: list[str]) -> None:
        rows.append((label, cells))

    summaries = [r.summary for r in replays]
    add("jobs", [str(s.jobs) for s in summaries])
    states = sorted({k for s in summaries for k in s.states})
    for state in states:
        add(f"  {state}", [str(s.states.get(state, 0)) for s in summaries])
    for name in ("mean", "p50", "p99"):
        add(f"wait {name}", [_hours(s.wait[name]) for s in summaries])
    for name in ("mean", "p50", "p99"):
        add(f"JCT {name}", [_hours(s.jct[name]) for s in summaries])
    add("makespan", [_hours(s.makespan_s) for s in summaries])
    labels = list(dict.fromkeys(k for s in summaries for k in s.utilization))
    for label in labels:
        add(f"util {label}", [f"{s.utilization.get(label, 0.0):.1%}" for s in summaries])
    add("Jain (users)", [f"{s.jain_users:.3f}" for s in summaries])
    add("FTF worst user", [f"{s.ftf_worst:.2f}" for s in summaries])
    add("stranded accel.", [f"{s.stranded:.1%}" for s in summaries])
    add("preemptions", [str(s.preemptions) for s in summaries])
    add("lost work", [_hours(s.lost_work_s) for s in summaries])
    if any(s.migrations or s.checkpoint_s for s in summaries):
        add("migrations", [str(s.migrations) for s in summaries])
        add("checkpointing", [_hours(s.checkpoint_s) for s in summaries])
    add("replay wall", [f"{r.wall_s:.1f}s" for r in replays])
    return rows


def render(replays: Sequence[Replay], meta: dict[str, Any], console: Console) -> None:
    """Print the comparison table, then wait per queue."""
    console.print(
        f"[bold]Replay[/bold] of {meta.get('workload', '?')} ({meta.get('jobs', '?')} jobs) "
        f"on {meta.get('cluster', '?')} ({meta.get('nodes', '?')} nodes)",
        highlight=False,
    )
    table = Table()
    table.add_column("metric")
    for replay in replays:
        table.add_column(replay.policy, justify="right")
    for label, cells in comparison_rows(replays):
        table.add_row(label, *cells)
    console.print(table)
    queues = sorted({q for r in replays for q in r.summary.wait_by_queue})
    if len(queues) > 1:
        per_queue = Table(title="Wait per queue (mean / p99)", title_justify="left")
        per_queue.add_column("queue")
        for replay in replays:
            per_queue.add_column(replay.policy, justify="right")
        for queue in queues:
            cells = []
            for replay in replays:
                stats = replay.summary.wait_by_queue.get(queue)
                cells.append(
                    "-" if stats is None else f"{_hours(stats['mean'])} / {_hours(stats['p99'])}"
                )
            per_queue.add_row(queue, *cells)
        console.print(per_queue)


# -- the report folder ------------------------------------------------------------------


def _markdown(replays: Sequence[Replay], meta: dict[str, Any]) -> str:
    names = [r.policy for r in replays]
    lines = [
        "# Replay report",
        "",
        f"- workload: `{meta.get('workload', '?')}` ({meta.get('jobs', '?')} jobs)",
        f"- cluster: `{meta.get('cluster', '?')}` ({meta.get('nodes', '?')} nodes)",
        f"- seed: {meta.get('seed', 0)}; tick: {meta.get('tick_s', '?')} s",
        "",
        "| metric | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for label, cells in comparison_rows(replays):
        lines.append(f"| {label.strip()} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Wait is first start minus submit; JCT is end minus submit (succeeded jobs).",
        "Utilization is the time-weighted mean of used / capacity. Jain's index is over",
        "users' time-averaged dominant shares; FTF is JCT over the run time alone on 1/N",
        "of the cluster (see the simulator docs for the exact definitions).",
        "",
        "![utilization](utilization.png)",
        "",
        "![queue length](queue_length.png)",
        "",
        "![wait per queue](wait_by_queue.png)",
        "",
        "Per-job records: `jobs.csv`; every number above: `summary.json`.",
        "",
    ]
    return "\n".join(lines)


def _plots(out: Path, replays: Sequence[Replay]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[str] = []
    count = len(replays)
    fig, axes = plt.subplots(count, 1, figsize=(9, 2.6 * count), squeeze=False, sharex=True)
    for ax, replay in zip(axes[:, 0], replays, strict=True):
        data = downsample(replay.result.series)
        hours = np.asarray(data["time"]) / 3600.0
        for label, values in data["utilization"].items():
            ax.plot(hours, values, label=label, linewidth=1)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("utilization")
        ax.set_title(replay.policy, fontsize=10)
        ax.legend(loc="upper right", fontsize=7, ncol=4)
    axes[-1, 0].set_xlabel("virtual time (h)")
    fig.tight_layout()
    fig.savefig(out / "utilization.png", dpi=100)
    plt.close(fig)
    written.append("utilization.png")

    fig, ax = plt.subplots(figsize=(9, 3.5))
    for replay in replays:
        data = downsample(replay.result.series)
        ax.plot(np.asarray(data["time"]) / 3600.0, data["queued"], label=replay.policy)
    ax.set_xlabel("virtual time (h)")
    ax.set_ylabel("jobs waiting")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "queue_length.png", dpi=100)
    plt.close(fig)
    written.append("queue_length.png")

    fig, axes = plt.subplots(1, count, figsize=(4.5 * count, 3.5), squeeze=False, sharey=True)
    for ax, replay in zip(axes[0], replays, strict=True):
        by_queue: dict[str, list[float]] = {}
        for job in replay.result.jobs:
            if job.wait_s is not None:
                by_queue.setdefault(job.queue, []).append(job.wait_s / 3600.0)
        for queue, waits in sorted(by_queue.items()):
            ordered = np.sort(np.asarray(waits))
            ax.plot(ordered, np.arange(1, ordered.size + 1) / ordered.size, label=queue)
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_xlabel("wait (h)")
        ax.set_title(replay.policy, fontsize=10)
        ax.legend(fontsize=7)
    axes[0, 0].set_ylabel("fraction of jobs (CDF)")
    fig.tight_layout()
    fig.savefig(out / "wait_by_queue.png", dpi=100)
    plt.close(fig)
    written.append("wait_by_queue.png")
    return written


def write_report(out: str | Path, replays: Sequence[Replay], meta: dict[str, Any]) -> list[str]:
    """Write the report folder; returns the file names written."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.md").write_text(_markdown(replays, meta), encoding="utf-8")
    summary = report_document(replays, meta, jobs=False)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    with open(folder / "jobs.csv", "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["policy", *JOB_COLUMNS])
        for replay in replays:
            for row in job_rows(replay.result.jobs):
                writer.writerow(
                    [replay.policy, *("" if row[c] is None else row[c] for c in JOB_COLUMNS)]
                )
    return ["report.md", "summary.json", "jobs.csv", *_plots(folder, replays)]
