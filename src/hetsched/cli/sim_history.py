"""``hetsched sim replay --history FILE``: replay a recorded history (``hetsched history
export``) under the profile it ran under, and under others, side by side with what
happened; the reproduction says job by job whether the replay placed it where the service
did, and why not where it did not."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hetsched.cli.output import OutputFormat, console, fail, print_json
from hetsched.framework.profile import ProfileError, parse_profile
from hetsched.model.history import HistoryDocument, load_history
from hetsched.model.specs import SpecError
from hetsched.sim.engine import EngineConfig, Progress
from hetsched.sim.history import HistoryInputs, history_inputs
from hetsched.sim.history_replay import (
    Watched,
    recorded_summary,
    replay_history,
    reproduction,
)
from hetsched.sim.replay import Policy
from hetsched.sim.replay_report import comparison_rows, report_document, write_report

__all__ = ["HistoryReport", "load_inputs", "recorded_policy", "replay_recorded"]

#: jobs whose difference the table lists (all of them are in -o json and --out)
_SHOWN = 20


def load_inputs(path: Path) -> tuple[HistoryDocument, HistoryInputs]:
    """The document and the replay's inputs; exits naming the problems."""
    try:
        document = load_history(path)
        return document, history_inputs(document)
    except SpecError as exc:
        fail(str(exc), 2)


def recorded_policy(document: HistoryDocument, path: Path) -> Policy:
    """The profile the service ran under, as the history recorded it."""
    if document.profile is None:
        fail(f"{path}: the history records no profile: give the one it ran under (--profile)", 2)
    try:
        profile = parse_profile(document.profile)
    except ProfileError as exc:
        fail(f"{path}: profile: {exc}", 2)
    return Policy(f"recorded ({profile.name})", profile)


def replay_recorded(
    recorded: tuple[Path, HistoryDocument, HistoryInputs],
    chosen: Sequence[Policy],
    recorded_first: bool,
    config: EngineConfig,
    start: Callable[[str], Progress],
) -> HistoryReport:
    """Replay under the recorded profile (first, when ``recorded_first``) and ``chosen``;
    ``recorded``: the history's file, document and inputs (:func:`load_inputs`);
    ``start(name)`` gives the progress callback of one replay."""
    path, document, inputs = recorded
    policies = [recorded_policy(document, path), *chosen] if recorded_first else list(chosen)
    seen: set[str] = set()
    for index, policy in enumerate(policies):
        if policy.name in seen:
            policies[index] = dataclasses.replace(policy, name=f"{policy.name}#{index + 1}")
        seen.add(policies[index].name)
    watched = [
        replay_history(inputs, p, document.seed, config, progress=start(p.name)) for p in policies
    ]
    return HistoryReport(path, document, inputs, watched)


@dataclasses.dataclass
class HistoryReport:
    """The replays of one history, and the ways to show them."""

    path: Path
    document: HistoryDocument
    inputs: HistoryInputs
    watched: list[Watched]

    def meta(self) -> dict[str, Any]:
        return {
            "history": str(self.path),
            "source": self.document.source,
            "workload": str(self.path),
            "jobs": len(self.inputs.workload),
            "cluster": "recorded",
            "nodes": len(self.inputs.nodes),
            "seed": self.document.seed,
            "policies": [w.replay.policy for w in self.watched],
        }

    def document_json(self, jobs: bool) -> dict[str, Any]:
        replays = [w.replay for w in self.watched]
        out = report_document(replays, self.meta(), jobs=jobs)
        out["recorded"] = recorded_summary(self.document, self.inputs)
        out["left_out"] = self.inputs.left_out
        out["reproduction"] = [reproduction(self.document, self.inputs, w) for w in self.watched]
        return out

    def emit(self, output: OutputFormat, jobs: bool, out: Path | None) -> None:
        """Print the report (a table, or JSON with or without per-job rows) and write the
        ``--out`` folder (the replay report, ``reproduction.json`` and a plot of waits)."""
        if output is OutputFormat.json:
            print_json(self.document_json(jobs))
        else:
            self.render()
        if out is not None:
            written = write_report(out, [w.replay for w in self.watched], self.meta())
            (out / "reproduction.json").write_text(
                json.dumps(self.document_json(jobs=False), indent=1) + "\n", encoding="utf-8"
            )
            plot = _plot_waits(out, self.document, self.watched)
            (out / "history.md").write_text(self.markdown(plot), encoding="utf-8")
            written += ["reproduction.json", plot, "history.md"]
            if output is OutputFormat.table:
                console.print(f"report written to {out}: {', '.join(written)}", highlight=False)

    def rows(self) -> list[tuple[str, list[str]]]:
        """The side-by-side rows: metric, what was recorded, then each replay's figure."""
        recorded = _recorded_cells(recorded_summary(self.document, self.inputs))
        return [
            (label, [recorded.get(label.strip(), "-"), *cells])
            for label, cells in comparison_rows([w.replay for w in self.watched])
        ]

    def markdown(self, plot: str) -> str:
        """``history.md`` of the ``--out`` folder: the rows, each replay's reproduction
        counts, and the plot of waits."""
        names = ["recorded", *(w.replay.policy for w in self.watched)]
        lines = [
            "# Replay of a recorded history",
            "",
            f"- history: `{self.path}` from {self.document.source}",
            f"- jobs replayed: {len(self.inputs.workload)}; left out: {len(self.inputs.left_out)}",
            "",
            "| metric | " + " | ".join(names) + " |",
            "|---|" + "---:|" * len(names),
        ]
        lines += [
            f"| {label.strip()} | " + " | ".join(cells) + " |" for label, cells in self.rows()
        ]
        lines += ["", "| replay | reproduced | as recorded | elsewhere | start order |"]
        lines.append("|---|---|---:|---:|---|")
        for w in self.watched:
            result = reproduction(self.document, self.inputs, w)
            counts, order = result["placements"], result["start_order"]
            moved = counts["explained"] + counts["unexplained"]
            same = "same" if order["same"] else f"differs at #{order['first_difference'] + 1}"
            lines.append(
                f"| {w.replay.policy} | {'yes' if result['reproduced'] else 'no'} | "
                f"{counts['same']} | {moved} | {same} |"
            )
        lines += ["", f"![waits, recorded against replayed]({plot})", ""]
        lines.append("Every job's placement and reasons: `reproduction.json`.")
        return "\n".join(lines) + "\n"

    def render(self) -> None:
        from rich.table import Table

        meta = self.meta()
        console.print(
            f"[bold]Replay of the history[/bold] {self.path} ({meta['jobs']} jobs, "
            f"{meta['nodes']} nodes; from {self.document.source})",
            highlight=False,
        )
        for reason in sorted(set(self.inputs.left_out.values())):
            count = sum(1 for r in self.inputs.left_out.values() if r == reason)
            console.print(f"left out: {count} job(s): {reason}", highlight=False)
        table = Table()
        table.add_column("metric")
        table.add_column("recorded", justify="right")
        for w in self.watched:
            table.add_column(w.replay.policy, justify="right")
        for label, cells in self.rows():
            table.add_row(label, *cells)
        console.print(table)
        names = {j.id: str(j.spec.get("name", "")) for j in self.document.jobs}
        # the first profile is the one the service ran under (recorded, or --profile)
        for index, w in enumerate(self.watched):
            _render_reproduction(reproduction(self.document, self.inputs, w), index == 0, names)


def _span(seconds: float) -> str:
    """As the replay rows show times (replay_report)."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.2f}h"


def _recorded_cells(summary: dict[str, Any]) -> dict[str, str]:
    """The recorded column of the side-by-side table, by the replay rows' labels."""
    cells = {"jobs": str(summary["jobs"]), "makespan": _span(summary["makespan_s"])}
    cells |= {state: str(n) for state, n in summary["states"].items()}
    for name in ("mean", "p50", "p99"):
        cells[f"wait {name}"] = _span(summary["wait_s"][name])
        cells[f"JCT {name}"] = _span(summary["jct_s"][name])
    for label, value in summary["utilization"].items():
        cells[f"util {label}"] = f"{value:.1%}"
    cells["preemptions"] = str(summary["preemptions"])
    return cells


def _where(placed: list[dict[str, Any]]) -> str:
    return ", ".join(f"{p['node']} {' '.join(p['devices'])}".strip() for p in placed) or "-"


def _render_reproduction(result: dict[str, Any], recorded: bool, names: dict[str, str]) -> None:
    """The reproduction's verdict (under the recorded profile), or how many jobs another
    profile places elsewhere; then the jobs placed elsewhere, with the reason if any."""
    counts, order = result["placements"], result["start_order"]
    moved = counts["explained"] + counts["unexplained"]
    started = (
        "start order the same"
        if order["same"]
        else f"start order differs at start #{order['first_difference'] + 1}"
    )
    if recorded:
        verdict = "[green]reproduced[/green]" if result["reproduced"] else "[red]differs[/red]"
        head = (
            f"{verdict}: {counts['same']} jobs placed as recorded, {counts['explained']} "
            f"elsewhere for a recorded reason, {counts['unexplained']} elsewhere without one"
        )
    else:
        head = f"would have placed {moved} of {moved + counts['same']} jobs elsewhere"
    console.print(f"{result['policy']}: {head}; {started}", highlight=False)
    shown = [j for j in result["jobs"] if j["status"] in ("explained", "unexplained")]
    for job in shown[:_SHOWN]:
        label = f"{job['id']} ({names[job['id']]})" if names.get(job["id"]) else job["id"]
        # under another profile a recorded reason is not why a job moved
        why = f": {'; '.join(job['why'])}" if job["why"] and recorded else ""
        console.print(
            f"  {label}: ran on {_where(job['recorded'])}, replayed on "
            f"{_where(job['replayed'])}{why}",
            highlight=False,
        )
    if len(shown) > _SHOWN:
        console.print(f"  ... and {len(shown) - _SHOWN} more (-o json lists all)")


def _plot_waits(out: Path, document: HistoryDocument, watched: list[Watched]) -> str:
    """Each job's wait as recorded against its wait in each replay."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recorded = {
        j.id: j.first_started_s - j.submit_s for j in document.jobs if j.first_started_s is not None
    }
    fig, ax = plt.subplots(figsize=(5.5, 5))
    top = max(recorded.values(), default=1.0)
    for w in watched:
        pairs = [
            (recorded[o.job_id], o.wait_s)
            for o in w.replay.result.jobs
            if o.job_id in recorded and o.wait_s is not None
        ]
        if pairs:
            xs, ys = zip(*pairs, strict=True)
            ax.scatter(xs, ys, s=12, label=w.replay.policy)
            top = max(top, *ys)
    ax.plot([0, top], [0, top], color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("wait as recorded (s)")
    ax.set_ylabel("wait in the replay (s)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "waits_recorded_vs_replay.png", dpi=100)
    plt.close(fig)
    return "waits_recorded_vs_replay.png"
