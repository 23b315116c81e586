"""A recorded history (:mod:`hetsched.model.history`) as a replay's inputs: the cluster,
the workload, the cancellations and node changes, and what happened, to compare with.

What the simulator is told, job by job:

* the job as it was submitted (the same job-spec fields, built by the same code), at its
  submit time;
* its run time: the longest task of its last run (from started to ended). A job that ran
  several times (preempted, requeued after a failure or a lost node) is replayed with its
  last run's length; a run still going when the history was taken counts until then;
* a cancel at the time it was cancelled. A job cancelled while it ran is given one second
  more than it ran, so the cancel, not its own end, stops it, as it did;
* nodes that joined after the start join at that time, and nodes that left leave then.

What the simulator cannot be told, and so is a difference to explain rather than to
reproduce: a task that failed (it succeeds in a replay), a job requeued after a failure,
and jobs that never ran (pending or rejected when the history was taken: left out, since
their run time is unknown; a dependency on one is dropped). :func:`explain` says which
applies to a job.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from hetsched.model.cluster_spec import parse_cluster
from hetsched.model.device import Node
from hetsched.model.history import HistoryDocument, HistoryJob
from hetsched.model.job import Job
from hetsched.model.lifecycle import JobState
from hetsched.model.specs import JobSpec, SpecError, format_errors
from hetsched.model.workflow import split_element
from hetsched.scheduler.events import NodeAdded, NodeRemoved
from hetsched.sim.engine import ClusterChange
from hetsched.sim.workload import Workload, WorkloadJob

__all__ = [
    "HistoryInputs",
    "Placed",
    "by_id",
    "explain",
    "history_inputs",
    "recorded_placements",
    "run_time",
    "start_order",
]

#: seconds a job cancelled while it ran is given beyond what it ran (see the docstring)
CANCEL_MARGIN_S = 1.0


@dataclass(frozen=True, slots=True)
class Placed:
    """Where one task of a job's first run went: its node and devices (sorted)."""

    task: int
    node: str
    devices: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HistoryInputs:
    """What a replay of a history runs on, and the jobs left out with the reason."""

    nodes: list[Node]
    workload: Workload
    changes: list[ClusterChange]
    cancellations: list[tuple[float, str]]
    left_out: dict[str, str] = field(default_factory=dict)
    #: device id as recorded -> the id of the same device in the rebuilt cluster
    device_ids: dict[str, str] = field(default_factory=dict)


def _job(item: HistoryJob, left_out: Collection[str]) -> Job:
    """The job as submitted; its dependencies on jobs left out of the replay dropped."""
    element = split_element(item.id) if item.element is not None else None
    own = item.id if element is None else element[0]
    spec = {**item.spec, "id": own, "user": item.user, "submit_time": item.submit_s}
    if isinstance(spec.get("after"), list):
        spec["after"] = [
            a for a in spec["after"] if not (isinstance(a, dict) and a.get("job") in left_out)
        ]
    try:
        job = JobSpec.model_validate(spec).build()
    except ValidationError as exc:
        raise SpecError([f"job {item.id}: spec.{line}" for line in format_errors(exc)]) from None
    return job if element is None else job.element(element[1])


def run_time(item: HistoryJob, taken_s: float) -> float | None:
    """The job's run time as replayed (see the module docstring); None: it never ran."""
    if not item.runs:
        return None
    last = max(r.run for r in item.runs)
    lengths = [
        (r.ended_s if r.ended_s is not None else taken_s) - r.started_s
        for r in item.runs
        if r.run == last and r.started_s is not None
    ]
    return max([0.0, *lengths])


def _nodes(document: HistoryDocument) -> tuple[list[Node], list[ClusterChange], dict[str, str]]:
    if not document.nodes:
        raise SpecError(
            [
                "nodes: the history records no nodes (the store's service has not started "
                "since it was upgraded to keep them, or it is not hetsched up's)"
            ]
        )
    built = parse_cluster({"nodes": [n.entry for n in document.nodes]}, "nodes")
    first = min((j.submit_s for j in document.jobs), default=0.0)
    start: list[Node] = []
    changes: list[ClusterChange] = []
    ids: dict[str, str] = {}
    for recorded, node in zip(document.nodes, built, strict=True):
        ids.update(zip(recorded.device_ids, (d.id for d in node.devices), strict=False))
        if recorded.joined_s <= first:
            start.append(node)
        else:
            changes.append(ClusterChange(recorded.joined_s, NodeAdded(node)))
        if recorded.left_s is not None:
            changes.append(ClusterChange(recorded.left_s, NodeRemoved(node.name, "node left")))
    changes.sort(key=lambda c: c.time)
    return start, changes, ids


def history_inputs(document: HistoryDocument) -> HistoryInputs:
    """The replay's inputs; SpecError when a node entry or a job spec does not build."""
    nodes, changes, ids = _nodes(document)
    jobs: list[WorkloadJob] = []
    cancels: list[tuple[float, str]] = []
    left_out: dict[str, str] = {}
    lengths = {item.id: run_time(item, document.taken_s) for item in document.jobs}
    for item in document.jobs:
        if lengths[item.id] is None and item.cancelled_s is None:
            left_out[item.id] = f"never ran ({item.state.value}): its run time is unknown"
    for index, item in enumerate(document.jobs):
        if item.id in left_out:
            continue
        length, cancelled = lengths[item.id], item.cancelled_s
        if length is None:
            length = 0.0
        elif cancelled is not None:
            length += CANCEL_MARGIN_S
        jobs.append(WorkloadJob(_job(item, left_out), length, index + 1))
        if cancelled is not None:
            cancels.append((cancelled, item.id))
    jobs.sort(key=lambda j: j.job.submit_time)
    workload = Workload(tuple(jobs), document.source)
    return HistoryInputs(nodes, workload, changes, cancels, left_out, ids)


def recorded_placements(item: HistoryJob, ids: dict[str, str]) -> tuple[Placed, ...]:
    """Where the job's first run went, in the rebuilt cluster's device ids."""
    if not item.runs:
        return ()
    first = min(r.run for r in item.runs)
    placed = [
        Placed(r.task, r.node, tuple(sorted(ids.get(d, d) for d in r.devices)))
        for r in item.runs
        if r.run == first
    ]
    return tuple(sorted(placed, key=lambda p: p.task))


def explain(item: HistoryJob) -> list[str]:
    """What happened to the job that a replay does not reproduce (empty: nothing)."""
    out: list[str] = []
    failed = [r for r in item.runs if r.state == "exited" and (r.exit_code or 0) != 0]
    if item.state is JobState.FAILED or failed:
        code = item.exit_code if item.exit_code is not None else "?"
        out.append(f"failed (exit {code}): a replay runs it for the same time and succeeds")
    lost = [r for r in item.runs if r.state == "lost"]
    if lost:
        out.append(f"lost {len(lost)} task(s) with their node: {lost[0].reason or 'gone'}")
    if item.restarts:
        out.append(f"restarted {item.restarts} time(s) after a failure or a lost node")
    if item.preemptions:
        out.append(f"preempted {item.preemptions} time(s)")
    if item.cancelled_s is not None:
        out.append(f"{item.cancel_cause or 'cancelled'}: cancelled at the same time in the replay")
    if item.state in (JobState.PENDING, JobState.RUNNING):
        out.append(f"still {item.state.value} when the history was taken")
    return out


def by_id(document: HistoryDocument) -> dict[str, HistoryJob]:
    """The document's jobs by id."""
    return {j.id: j for j in document.jobs}


def start_order(items: Sequence[HistoryJob]) -> list[str]:
    """Ids of the jobs that ran, in the order their first run was placed (a turn's jobs in
    the order they came)."""
    ran = [
        (min(r.bound_s for r in j.runs if r.run == min(x.run for x in j.runs)), index, j.id)
        for index, j in enumerate(items)
        if j.runs
    ]
    return [job_id for _bound, _index, job_id in sorted(ran)]
