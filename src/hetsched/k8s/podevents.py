"""What the Kubernetes scheduler tells users about pods: Events and the PodScheduled
condition, as kube-scheduler posts them."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

from hetsched.k8s.api import ApiError, ClusterAPI
from hetsched.k8s.translate import pod_info

__all__ = ["MESSAGE_LIMIT", "PodEvents"]

Obj = dict[str, Any]

#: the longest message put in an Event (events.k8s.io caps ``note`` at 1 KiB)
MESSAGE_LIMIT = 1024


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodEvents:
    """Posts Events about pods as ``component`` (``instance`` names this process).
    Failures to post are ignored: an Event is a courtesy, never a reason to stop."""

    def __init__(self, api: ClusterAPI, component: str, instance: str) -> None:
        self.api = api
        self.component = component
        self.instance = instance
        #: pod key -> the last FailedScheduling message posted for it (no repeats)
        self.reported: dict[str, str] = {}

    def failed_scheduling(self, obj: Obj, message: str) -> None:
        """A FailedScheduling Warning on the pod and its PodScheduled=False condition,
        unless the same message was just posted."""
        key = pod_info(obj).key
        message = message[:MESSAGE_LIMIT]
        if self.reported.get(key) == message:
            return
        self.reported[key] = message
        self.post(obj, "Warning", "FailedScheduling", message)
        # what kubectl shows as the pod's condition: PodScheduled False, Unschedulable
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastTransitionTime": _now_iso(),
        }
        meta = obj.get("metadata", {})
        with contextlib.suppress(ApiError):
            self.api.patch_pod_status(
                str(meta.get("namespace") or "default"),
                str(meta.get("name")),
                {"status": {"conditions": [condition]}},
            )

    def post(
        self, obj: Obj, kind: str, reason: str, message: str, action: str = "Scheduling"
    ) -> None:
        meta = obj.get("metadata", {})
        namespace = str(meta.get("namespace") or "default")
        stamp = _now_iso()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'pod')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "action": action,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        with contextlib.suppress(ApiError):
            self.api.create_event(namespace, event)
