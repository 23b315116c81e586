"""A pod's network topology request from its annotations (docs/kubernetes.md).

``hetsched.io/topology-required`` or ``hetsched.io/topology-preferred`` name a level (a
node label of the scheduler's ``--topology-level`` list); ``hetsched.io/topology-slice-size``
and ``hetsched.io/topology-slice-required`` cut a pod group into slices. Kueue's PodSet
annotations (``kueue.x-k8s.io/podset-required-topology``, ``podset-preferred-topology``,
``podset-slice-size``, ``podset-slice-required-topology``) mean the same, so workloads
written for Kueue's Topology Aware Scheduling run unchanged; where both name one thing
they must agree. A conflicting or malformed value is a TranslateError naming the
annotation.
"""

from __future__ import annotations

from collections.abc import Mapping

from hetsched.k8s.names import (
    KUEUE_PREFERRED,
    KUEUE_REQUIRED,
    KUEUE_SLICE_REQUIRED,
    KUEUE_SLICE_SIZE,
    TOPOLOGY_PREFERRED,
    TOPOLOGY_REQUIRED,
    TOPOLOGY_SLICE_REQUIRED,
    TOPOLOGY_SLICE_SIZE,
)
from hetsched.k8s.podrequest import TranslateError
from hetsched.model.topology import TopologyRequest

__all__ = ["COMPLETION_INDEX", "pod_topology", "rank_key"]

#: an Indexed Job's pod annotation: its completion index, the rank of a training worker
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

#: each field: the hetsched annotation, then Kueue's
_FIELDS = {
    "required": (TOPOLOGY_REQUIRED, KUEUE_REQUIRED),
    "preferred": (TOPOLOGY_PREFERRED, KUEUE_PREFERRED),
    "slice_size": (TOPOLOGY_SLICE_SIZE, KUEUE_SLICE_SIZE),
    "slice_required": (TOPOLOGY_SLICE_REQUIRED, KUEUE_SLICE_REQUIRED),
}


def _value(annotations: Mapping[str, str], where: str, names: tuple[str, str]) -> str | None:
    """The field's value, from either annotation; they must agree when both are set."""
    found = {name: annotations[name].strip() for name in names if name in annotations}
    values = set(found.values())
    if len(values) > 1:
        shown = ", ".join(f"{name}={value!r}" for name, value in found.items())
        raise TranslateError(f"{where}: annotations disagree: {shown}")
    for name, value in found.items():
        if not value:
            raise TranslateError(f"{where}: annotation {name} is empty (expected a node label)")
        return value
    return None


def rank_key(annotations: Mapping[str, str], key: str) -> tuple[int, int, str]:
    """Where a pod goes in its group's task order (task ``i`` is the ``i``-th): by its
    Indexed Job completion index where it has one, then by its key, so consecutive ranks
    are consecutive tasks and placement keeps them together."""
    raw = annotations.get(COMPLETION_INDEX, "")
    if raw.isdigit():
        return (0, int(raw), key)
    return (1, 0, key)


def pod_topology(annotations: Mapping[str, str], where: str) -> TopologyRequest | None:
    """The request of a pod's annotations (``where`` names the pod in errors), or None."""
    values = {field: _value(annotations, where, names) for field, names in _FIELDS.items()}
    if not any(values.values()):
        return None
    required, preferred = values["required"], values["preferred"]
    if required is not None and preferred is not None:
        raise TranslateError(
            f"{where}: annotations {TOPOLOGY_REQUIRED} and {TOPOLOGY_PREFERRED} (or Kueue's "
            "required and preferred topology) exclude each other"
        )
    if required is None and preferred is None:
        raise TranslateError(
            f"{where}: a slice needs {TOPOLOGY_REQUIRED} or {TOPOLOGY_PREFERRED} too"
        )
    size = values["slice_size"]
    slice_required = values["slice_required"]
    if (size is None) != (slice_required is None):
        raise TranslateError(
            f"{where}: annotations {TOPOLOGY_SLICE_SIZE} and {TOPOLOGY_SLICE_REQUIRED} go together"
        )
    count: int | None = None
    if size is not None:
        try:
            count = int(size)
        except ValueError:
            count = 0
        if count < 1:
            raise TranslateError(
                f"{where}: annotation {TOPOLOGY_SLICE_SIZE} must be a positive integer, "
                f"got {size!r}"
            )
    return TopologyRequest(required, preferred, count, slice_required)
