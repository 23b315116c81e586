"""What the Kubernetes scheduler tells users about pods: Events and the PodScheduled
condition, as kube-scheduler posts them."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hetsched.k8s.api import ApiError, ClusterAPI
from hetsched.k8s.translate import pod_info

__all__ = ["MESSAGE_LIMIT", "PodEvents"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: the longest message put in an Event (events.k8s.io caps ``note`` at 1 KiB)
MESSAGE_LIMIT = 1024


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodEvents:
    """Posts Events about pods as ``component`` (``instance`` names this process).
    Failures to post are ignored: an Event is a courtesy, never a reason to stop.

    With ``queue_size`` > 0 the writes are queued and carried out by a thread of their own,
    as client-go's event broadcaster does for kube-scheduler: nothing waits for them, and
    when ``queue_size`` writes are waiting already a new one is dropped (counted in
    ``dropped``), so a burst of pods never slows scheduling down for its events."""

    def __init__(self, api: ClusterAPI, component: str, instance: str, queue_size: int = 0) -> None:
        self.api = api
        self.component = component
        self.instance = instance
        #: pod key -> the last FailedScheduling message posted for it (no repeats)
        self.reported: dict[str, str] = {}
        #: writes dropped because the queue was full
        self.dropped = 0
        self._size = queue_size
        self._queue: queue.SimpleQueue[Callable[[], None] | None] | None = None
        if queue_size > 0:
            self._queue = queue.SimpleQueue()
            threading.Thread(
                target=self._run, args=(self._queue,), name="events", daemon=True
            ).start()

    @staticmethod
    def _run(writes: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        while (write := writes.get()) is not None:
            with contextlib.suppress(ApiError):
                write()

    def _write(self, write: Callable[[], None]) -> None:
        if self._queue is None:
            with contextlib.suppress(ApiError):
                write()
            return
        # writers racing may each add one past the bound: it limits memory, not exactly
        if self._queue.qsize() < self._size:
            self._queue.put(write)
        else:
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.warning("events queue full: %d event(s) dropped so far", self.dropped)

    def close(self) -> None:
        """Stop the queue's thread once it has written what is queued; later writes are
        carried out by their caller."""
        if self._queue is not None:
            self._queue.put(None)
            self._queue = None

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
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        patch = {"status": {"conditions": [condition]}}
        self._write(lambda: self.api.patch_pod_status(namespace, name, patch))

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
        self._write(lambda: self.api.create_event(namespace, event))
