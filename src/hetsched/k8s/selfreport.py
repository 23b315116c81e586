"""``hetsched checkpoint`` inside a pod: the container reports a checkpoint by writing the
``hetsched.io/checkpointed`` annotation on its own pod, with the pod's service account
(docs/checkpointing.md, "In Kubernetes"). No sidecar, no other service: one PATCH.

The pod is found from downward API env vars: ``POD_NAME`` (``metadata.name``) and
``POD_NAMESPACE`` (``metadata.namespace``; else the service account's namespace file).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hetsched.k8s.api import ClusterAPI
from hetsched.k8s.checkpoints import report_value
from hetsched.k8s.names import CHECKPOINTED

__all__ = ["NAMESPACE_FILE", "in_pod", "own_pod", "report_checkpoint"]

#: where a pod's service account token mount says its namespace
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def in_pod(env: Mapping[str, str]) -> bool:
    """Whether this runs in a pod that can report: ``POD_NAME`` is set."""
    return bool(env.get("POD_NAME"))


def own_pod(env: Mapping[str, str], namespace_file: Path = NAMESPACE_FILE) -> tuple[str, str]:
    """(namespace, name) of the pod this runs in; ValueError naming what is missing."""
    name = env.get("POD_NAME", "").strip()
    if not name:
        raise ValueError(
            "POD_NAME is not set: give the container env POD_NAME from the downward API "
            "(fieldRef metadata.name)"
        )
    namespace = env.get("POD_NAMESPACE", "").strip()
    if not namespace:
        try:
            namespace = namespace_file.read_text().strip()
        except OSError:
            namespace = ""
    if not namespace:
        raise ValueError(
            "POD_NAMESPACE is not set and the service account's namespace file is missing: "
            "give the container env POD_NAMESPACE (fieldRef metadata.namespace)"
        )
    return namespace, name


def report_checkpoint(
    api: ClusterAPI, namespace: str, name: str, step: int, path: str, wall: float | None = None
) -> dict[str, Any]:
    """Write the report on pod ``namespace/name``; what was written."""
    value = report_value(step, path, time.time() if wall is None else wall)
    api.patch_pod(namespace, name, {"metadata": {"annotations": {CHECKPOINTED: value}}})
    return {"pod": f"{namespace}/{name}", "annotation": CHECKPOINTED, "value": value}
