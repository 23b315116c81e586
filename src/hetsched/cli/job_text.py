"""How a job of the API reads as text in the CLI: its age, its resources, its checkpoint
and speed lines (``hetsched jobs``, ``job`` and ``why`` print them)."""

from __future__ import annotations

import time
from typing import Any

__all__ = [
    "age",
    "checkpoint_lines",
    "plural",
    "resources_text",
    "speed_lines",
    "workflow_lines",
]


def age(ts: float | None, now: float) -> str:
    """How long ago ``ts`` was, in the largest unit that reads well ("-" without one)."""
    if not ts:
        return "-"
    s = max(0.0, now - ts)
    return f"{s:.0f}s" if s < 120 else (f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.1f}h")


def plural(count: int, word: str) -> str:
    """``1 node``, ``2 nodes``, ``0 nodes``: a count with its noun (plural by ``s``)."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def resources_text(r: dict[str, Any]) -> str:
    """A job's ``resources`` on one line: cpu, memory, then each device request."""
    parts = [f"cpu {r.get('cpu', 0)}", f"mem {r.get('memory', 0)}"]
    for d in r.get("devices", []):
        amount = f"{d.get('share')}/1000" if d.get("share") else str(d.get("count", 1))
        model = d.get("model")
        if isinstance(model, list):  # the accepted models: ``1 gpu A100|H100``
            model = "|".join(map(str, model))
        parts.append(f"{amount} {d.get('class')}" + (f" {model}" if model else ""))
    return ", ".join(parts)


def checkpoint_lines(data: dict[str, Any]) -> list[tuple[str, str]]:
    """``checkpoint`` and ``lost work`` lines of a job (its last checkpoint, the work its
    stopped runs lost)."""
    out: list[tuple[str, str]] = []
    saved = data.get("checkpoint")
    if saved:
        when = time.strftime("%H:%M:%S", time.localtime(saved["time"]))
        text = f"run {saved['run']} at {when}"
        if saved.get("step") is not None:
            text += f", step {saved['step']}"
        if saved.get("path"):
            text += f", {saved['path']}"
        out.append(("checkpoint", text))
    lost = data.get("lost_work_s")
    if lost is not None:
        out.append(("lost work", f"{lost:.1f}s"))
    moved = data.get("migrations")
    if moved:
        out.append(("migrations", str(moved)))
    return out


_SOURCES = {
    "job": "its own speed map",
    "profile": "the profile's throughput table",
    "learned": "learned from progress reports",
    "none": "no speed information: every device model is equal",
}


def _rates(rates: dict[str, float]) -> str:
    return ", ".join(f"{m} {r:.4g}" for m, r in sorted(rates.items(), key=lambda i: -i[1]))


def speed_lines(speed: dict[str, Any] | None) -> list[tuple[str, str]]:
    """``speed``, ``learned`` and ``measured`` lines of a job (``why``'s ``speed`` object)."""
    if not speed:
        return []
    kind = speed["job_type"]
    text = (f"job type {kind}: " if kind else "") + _SOURCES.get(speed["source"], speed["source"])
    if speed["rates"]:
        text += f" ({_rates(speed['rates'])})"
    out = [("speed", text)]
    learned = {e["model"]: e for e in speed["estimates"]}
    if learned:
        out.append(
            (
                "learned",
                ", ".join(
                    f"{m} {e['steps_per_second']:.4g} steps/s per device ({e['samples']} intervals)"
                    for m, e in sorted(learned.items())
                ),
            )
        )
    measured = speed.get("measured")
    if measured and measured.get("steps_per_second") is not None:
        out.append(
            (
                "measured",
                f"{measured['steps_per_second']:.4g} steps/s on {measured['model']} this run "
                f"(at step {measured['steps']})",
            )
        )
    return out


def workflow_lines(data: dict[str, Any]) -> list[tuple[str, str]]:
    """``job``'s lines for what it waits for and, for an array, its elements: counts by
    state and the indexes that did not succeed."""
    lines: list[tuple[str, str]] = []
    after = data.get("after") or []
    if after:
        text = ", ".join(
            a["job"] + ("" if a.get("state", "succeeded") == "succeeded" else f" ({a['state']})")
            for a in after
        )
        if data.get("on_unmet") == "keep":
            text += " (kept if never met)"
        lines.append(("after", text))
    if data.get("array_of"):
        lines.append(("array", f"element {data['array_index']} of {data['array_of']}"))
    elements = data.get("elements")
    if elements:
        counts = ", ".join(f"{n} {state}" for state, n in sorted(elements["counts"].items()))
        lines.append(("array", f"{data['array']}: {elements['size']} elements: {counts}"))
        bad = elements.get("unsuccessful") or []
        if bad:
            shown = ",".join(str(i) for i in bad[:50]) + (",..." if len(bad) > 50 else "")
            lines.append(("failed", shown))  # or cancelled, or rejected
    return lines
