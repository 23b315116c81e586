"""Replay a recorded history and compare: with the profile it ran under, does the simulator
place every job where the service did, in the same order (the reproduction); with another
profile, what would have changed (waits, JCT, utilization, stranding, preemptions).

The replay is the simulator's ordinary event-driven run on the history's inputs
(:mod:`hetsched.sim.history`), watched for where each job's first run goes. A job whose
placement differs is either explained by what the simulator was not told
(:func:`hetsched.sim.history.explain`: a failure, a lost node, a cancel, ...) or counted as
unexplained; the reproduction holds when no difference is unexplained and the jobs started
in the recorded order.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsched.drivers.executor import Start
from hetsched.model.history import HistoryDocument
from hetsched.model.lifecycle import JobState
from hetsched.sim.accounting import device_label
from hetsched.sim.engine import EngineConfig, Progress, Simulator
from hetsched.sim.history import (
    HistoryInputs,
    Placed,
    explain,
    recorded_placements,
    start_order,
)
from hetsched.sim.metrics import percentiles, summarize
from hetsched.sim.replay import Policy, Replay

__all__ = ["Watched", "recorded_summary", "replay_history", "reproduction"]


class _Watching(Simulator):
    """The simulator, noting where each job's first run went and in which order."""

    placed: dict[str, tuple[Placed, ...]]
    order: list[str]

    def start_tasks(self, tasks: Sequence[Start], now: float) -> None:
        if tasks and tasks[0].key.job not in self.placed:
            job = tasks[0].key.job
            self.placed[job] = tuple(
                Placed(
                    t.key.task,
                    t.placement.node,
                    tuple(sorted(d.device_id for d in t.placement.devices)),
                )
                for t in sorted(tasks, key=lambda t: t.key.task)
            )
            self.order.append(job)
        super().start_tasks(tasks, now)


@dataclass(frozen=True, slots=True)
class Watched:
    """One replay of a history: the replay and where its jobs' first runs went."""

    replay: Replay
    placed: dict[str, tuple[Placed, ...]]
    order: list[str]


def replay_history(
    inputs: HistoryInputs,
    policy: Policy,
    seed: int = 0,
    config: EngineConfig | None = None,
    progress: Progress | None = None,
) -> Watched:
    """Replay the history's inputs under ``policy``."""
    simulator = _Watching(
        inputs.nodes,
        inputs.workload,
        policy.profile,
        seed,
        config,
        changes=inputs.changes,
        cancellations=inputs.cancellations,
        progress=progress,
    )
    simulator.placed, simulator.order = {}, []
    started = time.perf_counter()
    result = simulator.run()
    wall = time.perf_counter() - started
    replay = Replay(policy.name, seed, result, summarize(result), wall)
    return Watched(replay, simulator.placed, simulator.order)


def _cells(placed: Sequence[Placed]) -> list[dict[str, Any]]:
    return [{"task": p.task, "node": p.node, "devices": list(p.devices)} for p in placed]


def reproduction(
    document: HistoryDocument, inputs: HistoryInputs, watched: Watched
) -> dict[str, Any]:
    """Job by job, where the history and the replay placed its first run, and whether the
    jobs started in the same order; differences carry their explanation."""
    jobs: list[dict[str, Any]] = []
    counts = {"same": 0, "explained": 0, "unexplained": 0, "left_out": 0}
    for item in document.jobs:
        if item.id in inputs.left_out:
            counts["left_out"] += 1
            jobs.append({"id": item.id, "status": "left_out", "why": [inputs.left_out[item.id]]})
            continue
        recorded = recorded_placements(item, inputs.device_ids)
        replayed = watched.placed.get(item.id, ())
        why = explain(item)
        status = "same" if recorded == replayed else "explained" if why else "unexplained"
        counts[status] += 1
        row: dict[str, Any] = {"id": item.id, "status": status, "why": why}
        if status != "same":
            row |= {"recorded": _cells(recorded), "replayed": _cells(replayed)}
        jobs.append(row)
    # the order of the jobs that ran in both, those with a recorded reason aside
    both = set(watched.order) & {j.id for j in document.jobs if j.runs and not explain(j)}
    recorded_order = [j for j in start_order(document.jobs) if j in both]
    replay_order = [j for j in watched.order if j in both]
    first_apart = next(
        (i for i, (a, b) in enumerate(zip(recorded_order, replay_order, strict=True)) if a != b),
        None,
    )
    return {
        "policy": watched.replay.policy,
        "reproduced": counts["unexplained"] == 0 and first_apart is None,
        "placements": counts,
        "start_order": {
            "same": first_apart is None,
            "first_difference": first_apart,
            "recorded": recorded_order,
            "replayed": replay_order,
        },
        "jobs": jobs,
    }


def _utilization(document: HistoryDocument, inputs: HistoryInputs, span: float) -> dict[str, float]:
    """Time-weighted used / capacity per resource label over 0..span, from the runs."""
    capacity: dict[str, float] = {"cpu": float(sum(n.cpu_milli for n in inputs.nodes))}
    label_of: dict[str, str] = {}
    for node in inputs.nodes:
        for device in node.devices:
            label = device_label(device.device_class, device.model)
            label_of[device.id] = label
            capacity[label] = capacity.get(label, 0.0) + 1000.0
    used = dict.fromkeys(capacity, 0.0)
    for item in document.jobs:
        for run in item.runs:
            if run.started_s is None:
                continue
            length = (run.ended_s if run.ended_s is not None else document.taken_s) - run.started_s
            used["cpu"] += run.cpu_milli * length
            for held, share in zip(run.devices, run.shares, strict=False):
                at = label_of.get(inputs.device_ids.get(held, held))
                if at is not None:
                    used[at] += share * length
    return {k: used[k] / (capacity[k] * span) if capacity[k] and span > 0 else 0.0 for k in used}


def recorded_summary(document: HistoryDocument, inputs: HistoryInputs) -> dict[str, Any]:
    """What the history itself says, in the terms of a replay's summary (the jobs that
    were replayed): states, wait and JCT, makespan, utilization, preemptions."""
    items = [j for j in document.jobs if j.id not in inputs.left_out]
    waits = [j.first_started_s - j.submit_s for j in items if j.first_started_s is not None]
    jct = [
        j.ended_s - j.submit_s
        for j in items
        if j.state is JobState.SUCCEEDED and j.ended_s is not None
    ]
    ends = [j.ended_s for j in items if j.ended_s is not None]
    first = min((j.submit_s for j in items), default=0.0)
    makespan = max(ends, default=first) - first
    states: dict[str, int] = {}
    for j in items:
        states[j.state.value] = states.get(j.state.value, 0) + 1
    return {
        "jobs": len(items),
        "states": states,
        "wait_s": percentiles(np.asarray(waits)),
        "jct_s": percentiles(np.asarray(jct)),
        "makespan_s": makespan,
        "utilization": _utilization(document, inputs, max(ends, default=0.0)),
        "preemptions": sum(j.preemptions for j in items),
    }
