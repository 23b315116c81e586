"""The Kubernetes scheduler's history, from what the API server keeps: the scheduler has no
store of its own, and its pods and nodes are the record. ``hetsched history export
--kubectl-pods pods.json --kubectl-nodes nodes.json`` reads the output of ``kubectl get pods
-A -o json`` and ``kubectl get nodes -o json`` (lists, or ``kind: List`` objects) and
writes it in the format of :mod:`hetsched.model.history`.

What a pod says, and how it is read: the pods of the scheduler (``spec.schedulerName``),
each a one-task job as the scheduler sees it (:func:`hetsched.k8s.translate.pod_job`); its
submit time is ``metadata.creationTimestamp``; its run is on ``spec.nodeName`` with the
devices of its ``hetsched.io/assigned-devices`` annotation, placed when its
``PodScheduled`` condition turned true, started and ended when its containers did
(``status.containerStatuses``, else ``status.startTime``); its outcome is its phase
(``Succeeded``, ``Failed``: the first container's exit code; ``Running``; ``Pending``).

What it cannot say: pods already deleted (a Job's pods outlive it only until they are
garbage-collected), earlier runs of a pod that was recreated (a new pod is a new job), and
the profile the scheduler ran under (give it to the replay with ``--profile``). Kubernetes
keeps times to the second, so jobs placed within one second may start in another order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from hetsched.k8s.names import ASSIGNED_DEVICES
from hetsched.k8s.podrequest import TranslateError
from hetsched.k8s.translate import node_from_k8s, pod_info, pod_job
from hetsched.model.cluster_spec import node_entry
from hetsched.model.history import (
    HistoryDocument,
    HistoryJob,
    HistoryNode,
    HistoryRun,
    job_spec_document,
)
from hetsched.model.lifecycle import JobState

__all__ = ["history_from_kubectl", "items_of"]

_PHASES = {
    "Succeeded": JobState.SUCCEEDED,
    "Failed": JobState.FAILED,
    "Running": JobState.RUNNING,
    "Pending": JobState.PENDING,
}


def items_of(document: Any, what: str) -> list[Mapping[str, Any]]:
    """The objects of a ``kubectl get -o json`` answer (a ``List``) or a plain list."""
    items = document.get("items") if isinstance(document, Mapping) else document
    if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
        raise TranslateError(f"{what}: expected kubectl's JSON (an object with 'items')")
    return items


def _time(value: Any) -> float | None:
    """An RFC 3339 time (``2026-12-06T10:00:00Z``) as seconds since the epoch."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise TranslateError(f"not an RFC 3339 time: {value!r}") from None


def _status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    status = pod.get("status")
    return status if isinstance(status, Mapping) else {}


def _run_times(
    pod: Mapping[str, Any],
) -> tuple[float | None, float | None, float | None, int | None]:
    """When the pod was placed, started and ended, and its first container's exit code."""
    status = _status(pod)
    scheduled = [
        c
        for c in status.get("conditions") or []
        if isinstance(c, Mapping) and c.get("type") == "PodScheduled" and c.get("status") == "True"
    ]
    placed = _time(scheduled[0].get("lastTransitionTime")) if scheduled else None
    starts, ends, code = [], [], None
    for container in status.get("containerStatuses") or []:
        state = container.get("state") if isinstance(container, Mapping) else None
        for key in ("running", "terminated"):
            part = state.get(key) if isinstance(state, Mapping) else None
            if isinstance(part, Mapping):
                starts.append(_time(part.get("startedAt")))
                if key == "terminated":
                    ends.append(_time(part.get("finishedAt")))
                    code = part.get("exitCode") if code is None else code
    started = max((s for s in starts if s is not None), default=_time(status.get("startTime")))
    ended = max((e for e in ends if e is not None), default=None) if ends else None
    return placed, started, ended, code if isinstance(code, int) else None


def _job(pod: Mapping[str, Any], origin: float) -> HistoryJob:
    info = pod_info(pod)
    submitted = _time(pod["metadata"].get("creationTimestamp")) or origin
    placed, started, ended, code = _run_times(pod)
    state = _PHASES.get(info.phase, JobState.PENDING)
    terminal = state in (JobState.SUCCEEDED, JobState.FAILED)
    runs: tuple[HistoryRun, ...] = ()
    if info.node_name and started is not None:
        annotations = pod["metadata"].get("annotations") or {}
        held = json.loads(annotations.get(ASSIGNED_DEVICES) or "[]")
        runs = (
            HistoryRun(
                run=0,
                task=0,
                node=info.node_name,
                cpu_milli=pod_job(pod).resources.cpu_milli,
                devices=tuple(str(d["id"]) for d in held),
                shares=tuple(int(d["share"]) for d in held),
                bound_s=max((placed or started) - origin, 0.0),
                started_s=max(started - origin, 0.0),
                ended_s=None if ended is None or not terminal else max(ended - origin, 0.0),
                state="exited" if terminal else "running",
                exit_code=code if terminal else None,
            ),
        )
    return HistoryJob(
        id=info.key,
        user=info.namespace,
        spec=job_spec_document(pod_job(pod)),
        submit_s=max(submitted - origin, 0.0),
        state=state,
        exit_code=code if terminal else None,
        first_started_s=None if not runs else runs[0].started_s,
        ended_s=None if not runs else runs[0].ended_s,
        runs=runs,
    )


def history_from_kubectl(
    pods: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    scheduler_name: str,
    now: float,
    source: str = "kubernetes",
) -> HistoryDocument:
    """The history of the pods of ``scheduler_name`` on ``nodes`` (``now``: when taken).
    Raises TranslateError naming the pod or node it cannot read."""
    ours = [p for p in pods if pod_info(p).scheduler_name == scheduler_name]
    created = [_time(p["metadata"].get("creationTimestamp")) for p in ours]
    origin = min((c for c in created if c is not None), default=now)
    history_nodes = []
    for obj in nodes:
        node = node_from_k8s(obj)
        joined = _time(obj["metadata"].get("creationTimestamp")) or origin
        history_nodes.append(
            HistoryNode(
                entry=node_entry(node),
                device_ids=tuple(d.id for d in node.devices),
                joined_s=max(joined - origin, 0.0),
            )
        )
    jobs = sorted((_job(p, origin) for p in ours), key=lambda j: j.submit_s)
    return HistoryDocument(
        source=source,
        origin=origin,
        taken_s=max(now - origin, 0.0),
        nodes=tuple(history_nodes),
        jobs=tuple(jobs),
    )
