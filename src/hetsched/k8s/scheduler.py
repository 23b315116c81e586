"""The Kubernetes scheduler: a driver of the core over the API server.

It keeps a list+watch cache of nodes and of all pods, turns changes into core events, and
carries out the actions the core returns:

- a pending pod with ``spec.schedulerName`` ours is a JobSubmitted (the pods of one pod
  group are one job, submitted once ``hetsched.io/min-available`` of them exist; pods of a
  group that arrive after it was submitted are scheduled one by one);
- a bound pod we did not bind (another scheduler's, or ours before a restart) is taken
  back with ``Scheduler.restore`` on its node, so it counts as allocated;
- a pod reaching Succeeded/Failed is a TaskFinished; a pending pod deleted is a
  JobCancelled, a bound one a failed TaskFinished (a gang then stops as a whole);
- nodes: NodeAdded, NodeRemoved, and DeviceHealthChanged/DeviceAdded from the device
  annotation (other node changes are not followed);
- Bind: POST the pod's Binding, carrying ``hetsched.io/assigned-devices``,
  ``hetsched.io/assign-phase: allocating`` and ``hetsched.io/assigned-for`` as annotations
  (written with ``spec.nodeName`` in one update); a 409 means someone else bound it first,
  so our allocation is dropped and the pod is accounted where it really went;
- Pending and Reject: a ``FailedScheduling`` Warning event whose message is the
  explanation; Preempt and Kill: delete the pods with a grace period.

Decisions are taken one batch at a time on the caller's thread (:meth:`step`); only the
watches run on their own threads, feeding a queue.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from hetsched.cluster.assign import assign_devices
from hetsched.cluster.state import AllocationError, ClusterState
from hetsched.framework.profile import ProfileSpec
from hetsched.k8s.api import ApiError, ClusterAPI, WatchExpired
from hetsched.k8s.leader import LeaseLock
from hetsched.k8s.names import SCHEDULER_NAME
from hetsched.k8s.translate import (
    PodInfo,
    TranslateError,
    assignment_annotations,
    group_job,
    node_from_k8s,
    pod_info,
    pod_job,
    pod_request,
    restored_placement,
)
from hetsched.model.device import Node
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import (
    Action,
    Bind,
    DeviceAdded,
    DeviceHealthChanged,
    Event,
    JobCancelled,
    JobSubmitted,
    Kill,
    NodeAdded,
    NodeRemoved,
    Pending,
    Preempt,
    Reject,
    Scheduler,
    TaskFinished,
    TaskStopped,
    Tick,
)

__all__ = ["PodScheduler", "run_leading"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
#: what the watches feed the loop: (resource, event), or (resource, None) with a relist
Change = tuple[str, str, Obj]

#: the longest message put in an Event (events.k8s.io caps ``note`` at 1 KiB)
_MESSAGE_LIMIT = 1024


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _short(uid: str) -> str:
    return f"#{uid[:8]}" if uid else ""


class PodScheduler:
    """A secondary scheduler for the pods naming ``scheduler_name``.

    ``clock`` gives the core's time in seconds (monotonic by default). ``identity`` names
    this instance in events (``reportingInstance``).
    """

    def __init__(
        self,
        api: ClusterAPI,
        profile: ProfileSpec | None = None,
        scheduler_name: str = SCHEDULER_NAME,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
        identity: str = SCHEDULER_NAME,
        watch_timeout_s: int = 300,
    ) -> None:
        self.api = api
        self.name = scheduler_name
        self.identity = identity
        self.clock = clock
        self.core = Scheduler(ClusterState(), profile, seed)
        self.watch_timeout_s = watch_timeout_s
        #: the cache: the latest JSON of every node and pod
        self.nodes: dict[str, Obj] = {}
        self._node_models: dict[str, Node] = {}
        self.pods: dict[str, Obj] = {}
        #: pod key -> (job id, task): pods the core holds as tasks of a job
        self.owner: dict[str, tuple[str, int]] = {}
        #: job id -> its pods' keys, by task index
        self.members: dict[str, list[str]] = {}
        self._run: dict[str, int] = {}
        #: pod group id (``namespace/group``) -> keys of its pods waiting to reach the minimum
        self._groups: dict[str, list[str]] = {}
        self._groups_started: set[str] = set()
        #: pod key -> (job id, task, run): pods asked to stop, until they are gone
        self._stopping: dict[str, tuple[str, int, int]] = {}
        #: pod key -> the last FailedScheduling message posted for it (no repeats)
        self._reported: dict[str, str] = {}
        self._followups: list[Event] = []
        self._recheck: list[str] = []
        #: pods whose bind we lost (409), until we see them bound
        self._lost: set[str] = set()
        self._seq = itertools.count()
        self._queue: queue.Queue[Change | tuple[str, str, list[Obj]]] = queue.Queue()
        self._rv: dict[str, str] = {"nodes": "", "pods": ""}
        self._stop = threading.Event()
        #: held while a batch is applied
        self.lock = threading.RLock()
        self._threads: list[threading.Thread] = []
        #: every bind this instance carried out: (pod key, node); conflicts: pod keys
        self.bound: list[tuple[str, str]] = []
        self.conflicts: list[str] = []

    # -- the loop ------------------------------------------------------------------------

    def sync(self) -> None:
        """List nodes and pods and bring the cache (and the core) up to date with them.

        On a fresh instance this is the rebuild after a restart: bound pods are restored
        where they run, pending ones submitted."""
        nodes, self._rv["nodes"] = self.api.list_nodes()
        pods, self._rv["pods"] = self.api.list_pods()
        self.process(self._diff("nodes", nodes) + self._diff("pods", pods))

    def start_watches(self) -> None:
        self._stop.clear()
        for resource in ("nodes", "pods"):
            thread = threading.Thread(
                target=self._watch_loop, args=(resource,), name=f"watch-{resource}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=0.5)
        self._threads = [t for t in self._threads if t.is_alive()]

    def step(self, timeout_s: float = 1.0) -> None:
        """Wait up to ``timeout_s`` for changes, then handle everything queued (and the
        core's timers when due)."""
        changes: list[Change] = []
        try:
            item = self._queue.get(timeout=timeout_s)
            while True:
                changes += self._unpack(item)
                item = self._queue.get_nowait()
        except queue.Empty:
            pass
        wakeup = self.core.next_wakeup()
        if changes or self._followups or (wakeup is not None and wakeup <= self.clock()):
            self.process(changes)

    def run(self, stop: threading.Event, poll_s: float = 1.0) -> None:
        """Sync, watch and schedule until ``stop`` is set."""
        self.sync()
        self.start_watches()
        try:
            while not stop.is_set():
                self.step(poll_s)
        finally:
            self.stop()

    # -- watching ------------------------------------------------------------------------

    def _watch_loop(self, resource: str) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                for event in self.api.watch(resource, self._rv[resource], self.watch_timeout_s):
                    if self._stop.is_set():
                        return
                    rv = event.object.get("metadata", {}).get("resourceVersion")
                    if rv:
                        self._rv[resource] = str(rv)
                    self._queue.put((resource, event.type, event.object))
                backoff = 0.5
            except WatchExpired:
                log.info("watch of %s expired; relisting", resource)
                try:
                    items, rv = (
                        self.api.list_nodes() if resource == "nodes" else self.api.list_pods()
                    )
                except ApiError as exc:
                    log.warning("relist of %s failed: %s", resource, exc)
                    self._stop.wait(backoff)
                    continue
                self._rv[resource] = rv
                self._queue.put((resource, "RELIST", items))
            except Exception as exc:  # a dropped connection must not end the watch
                log.warning("watch of %s failed: %s; retrying", resource, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _unpack(self, item: Change | tuple[str, str, list[Obj]]) -> list[Change]:
        resource, kind, payload = item
        if kind == "RELIST":
            assert isinstance(payload, list)
            return self._diff(resource, payload)
        assert isinstance(payload, dict)
        return [(resource, kind, payload)]

    def _diff(self, resource: str, items: Iterable[Obj]) -> list[Change]:
        """Changes that bring the cache of ``resource`` to ``items`` (a full list)."""
        cache = self.nodes if resource == "nodes" else self.pods
        seen: dict[str, Obj] = {}
        for obj in items:
            meta = obj.get("metadata", {})
            key = meta.get("name", "")
            if resource == "pods":
                key = f"{meta.get('namespace') or 'default'}/{key}"
            seen[key] = obj
        changes: list[Change] = [(resource, "DELETED", cache[k]) for k in cache if k not in seen]
        for key, obj in seen.items():
            changes.append((resource, "MODIFIED" if key in cache else "ADDED", obj))
        return changes

    # -- changes into events -------------------------------------------------------------

    def process(self, changes: list[Change]) -> None:
        """Apply changes (nodes first, then pods), run the core, carry out its actions.

        Holds :attr:`lock`, so a reader of the core (the extender) sees whole batches."""
        with self.lock:
            self._process(changes)

    def _process(self, changes: list[Change]) -> None:
        now = self.clock()
        events: list[Event] = []
        for resource, kind, obj in changes:
            if resource == "nodes":
                events += self._node_change(kind, obj)
        self._handle(events, now)
        events = []
        for resource, kind, obj in changes:
            if resource == "pods":
                try:
                    events += self._pod_change(kind, obj)
                except TranslateError as exc:
                    self._report(obj, str(exc))
        events += self._submit_groups(now)
        self._handle(events or [Tick()], now)

    def _handle(self, events: list[Event], now: float) -> None:
        events = self._followups + events
        self._followups = []
        while events:
            actions = self.core.handle(events, now)
            for action in actions:
                self._carry_out(action)
            events, self._followups = self._followups, []
        recheck, self._recheck = self._recheck, []
        for key in recheck:
            obj = self.pods.get(key)
            if obj is not None and key not in self.owner:
                info = pod_info(obj)
                if info.node_name and not info.terminal:
                    self._restore(info, obj)

    def _node_change(self, kind: str, obj: Obj) -> list[Event]:
        name = str(obj.get("metadata", {}).get("name", ""))
        if kind == "DELETED":
            self.nodes.pop(name, None)
            if self._node_models.pop(name, None) is not None:
                return [NodeRemoved(name, "node deleted")]
            return []
        self.nodes[name] = obj
        try:
            node = node_from_k8s(obj)
        except TranslateError as exc:
            log.warning("%s", exc)
            return []
        old = self._node_models.get(name)
        self._node_models[name] = node
        if old is None:
            return [NodeAdded(node)]
        events: list[Event] = []
        known = {d.id: d for d in old.devices}
        for device in node.devices:
            before = known.get(device.id)
            if before is None:
                events.append(DeviceAdded(name, device))
            elif before.health != device.health:
                events.append(DeviceHealthChanged(device.id, device.health, "device plugin"))
        return events

    def _pod_change(self, kind: str, obj: Obj) -> list[Event]:
        info = pod_info(obj)
        if kind == "DELETED":
            self.pods.pop(info.key, None)
            return self._pod_gone(info.key)
        self.pods[info.key] = obj
        owned = self.owner.get(info.key)
        if owned is not None:
            job_id, task = owned
            if info.terminal:
                del self.owner[info.key]
                run = self._run.get(job_id, 1)
                return [TaskFinished(job_id, task, run, info.phase == "Succeeded", info.phase)]
            record = self.core.jobs.get(job_id)
            if info.node_name and record is not None and record.state is JobState.PENDING:
                # bound while it waited in our queue, by someone else (another scheduler, a
                # user, a former leader): stop placing it and count it where it went
                self._recheck.append(info.key)
                return self._withdraw(job_id, info.key, f"bound to {info.node_name} by another")
            return []
        if info.key in self._stopping:
            return []
        if info.key in self._lost:
            # we lost its bind race: wait for the object that shows where it went (a watch
            # may still deliver older versions that show it unbound)
            if not info.node_name:
                return []
            self._lost.discard(info.key)
        if info.group is not None and info.schedulable_by(self.name):
            waiting = self._groups.setdefault(f"{info.namespace}/{info.group}", [])
            if info.key not in waiting:
                waiting.append(info.key)
            return []
        if info.schedulable_by(self.name):
            job = pod_job(obj, info.key + _short(info.uid), self.clock())
            self._own(job.id, [info.key])
            return [JobSubmitted(job)]
        if info.node_name and not info.terminal and not info.deleting:
            self._restore(info, obj)
        return []

    def _own(self, job_id: str, keys: list[str]) -> None:
        self.members[job_id] = keys
        for task, key in enumerate(keys):
            self.owner[key] = (job_id, task)

    def assume(self, obj: Obj) -> None:
        """Account a pod someone just bound (the extender), before the watch shows it."""
        info = pod_info(obj)
        if info.key not in self.owner:
            self._restore(info, obj)

    def _restore(self, info: PodInfo, obj: Obj) -> None:
        """Account a bound pod we did not bind in this life: it holds its node's capacity."""
        placement = restored_placement(obj)
        if placement is None or placement.node not in self.core.state.node_index:
            return
        request = pod_request(obj)
        wanted = sum(d.primary.count for d in request.devices)
        if wanted and (
            len(placement.devices) != wanted or self.core.state.check(placement) is not None
        ):
            # no (or stale) device annotation: hold devices of the kind it asked for there
            row = self.core.state.row(placement.node)
            chosen = assign_devices(self.core.state, row, request, "most_used")
            placement = dataclasses.replace(placement, devices=tuple(chosen or ()))
        job = pod_job(obj, f"{info.key}{_short(info.uid)}@{info.node_name}")
        if info.scheduler_name != self.name:
            job = dataclasses.replace(job, preemptible=False)
        held = self.core.jobs.get(job.id)
        if held is not None:
            if held.placements:
                return  # accounted already
            # accounted before and released since (an assumption the extender took back):
            # the ended record keeps its id, so this takes a fresh one
            job = dataclasses.replace(job, id=f"{job.id}~{next(self._seq)}")
        try:
            self.core.restore(job, 1, {0: placement}, now=self.clock())
        except AllocationError as exc:
            log.warning("cannot account bound pod %s: %s", info.key, exc)
            return
        self._own(job.id, [info.key])
        self._run[job.id] = 1

    def _pod_gone(self, key: str) -> list[Event]:
        self._reported.pop(key, None)
        self._lost.discard(key)
        if key in self._stopping:
            return [TaskStopped(*self._stopping.pop(key))]
        for waiting in self._groups.values():
            if key in waiting:
                waiting.remove(key)
                return []
        owned = self.owner.pop(key, None)
        if owned is None:
            return []
        job_id, task = owned
        record = self.core.jobs.get(job_id)
        if record is None:
            return []
        if record.state is JobState.PENDING:
            return self._withdraw(job_id, key, f"pod {key} deleted")
        if task in record.placements:
            return [TaskFinished(job_id, task, record.run, False, "pod deleted")]
        return []

    def _withdraw(self, job_id: str, key: str, reason: str) -> list[Event]:
        """Cancel a pending job that lost its pod ``key``; the rest of a gang's pods wait
        for their group's minimum again."""
        self.owner.pop(key, None)
        for other in self.members.get(job_id, []):
            if other == key or self.owner.pop(other, None) is None or other not in self.pods:
                continue
            info = pod_info(self.pods[other])
            if info.group is not None:
                group = f"{info.namespace}/{info.group}"
                self._groups.setdefault(group, []).append(other)
                self._groups_started.discard(group)
        return [JobCancelled(job_id, reason)]

    def _submit_groups(self, now: float) -> list[Event]:
        events: list[Event] = []
        for group, waiting in sorted(self._groups.items()):
            if not waiting:
                continue
            infos = [pod_info(self.pods[k]) for k in waiting]
            minimum = max((i.min_available or 1) for i in infos)
            if group in self._groups_started:
                minimum = 1
            if len(waiting) < minimum:
                for key in waiting:
                    self._report(
                        self.pods[key],
                        f"waiting for pod group {group}: {len(waiting)} of the "
                        f"{minimum} pods it needs exist",
                    )
                continue
            keys = sorted(waiting)
            job_id = f"{group}#g{next(self._seq)}"
            try:
                job = group_job(job_id, [self.pods[k] for k in keys], minimum, now)
            except TranslateError as exc:
                for key in keys:
                    self._report(self.pods[key], str(exc))
                continue
            self._groups[group] = []
            self._groups_started.add(group)
            self._own(job_id, keys)
            events.append(JobSubmitted(job))
        return events

    # -- actions -------------------------------------------------------------------------

    def _carry_out(self, action: Action) -> None:
        match action:
            case Bind():
                self._bind(action)
            case Pending(job_id, explanation):
                for key in self._pending_pods(job_id):
                    self._report(self.pods[key], str(explanation))
            case Reject(job_id, reason):
                for key in self._pending_pods(job_id):
                    self._report(self.pods[key], f"rejected: {reason}")
            case Preempt(job_id=job_id, run=run, grace_s=grace_s, reason=reason):
                for key in self.members.get(job_id, []):
                    task = self.owner.get(key, (job_id, -1))[1]
                    self._stop_pod(key, (job_id, task, run), grace_s, f"preempted: {reason}")
                self._followups.append(JobCancelled(job_id, "preempted: its pods are deleted"))
            case Kill(job_id, task, run, reason):
                keys = self.members.get(job_id, [])
                if task < len(keys):
                    self._stop_pod(keys[task], (job_id, task, run), 30, reason)

    def _pending_pods(self, job_id: str) -> list[str]:
        return [
            k
            for k in self.members.get(job_id, [])
            if k in self.pods and not pod_info(self.pods[k]).node_name
        ]

    def _stop_pod(self, key: str, task: tuple[str, int, int], grace_s: float, why: str) -> None:
        obj = self.pods.get(key)
        if task[1] < 0:
            return
        if obj is None or key in self._lost or pod_info(obj).scheduler_name != self.name:
            # gone already, bound by someone else, or not ours to delete: nothing of ours
            # runs there, so its allocation is free now
            self._followups.append(TaskStopped(*task))
            return
        info = pod_info(obj)
        self._stopping[key] = task
        self.owner.pop(key, None)
        self._event(obj, "Normal", "Preempted" if why.startswith("preempted") else "Killing", why)
        try:
            self.api.delete_pod(info.namespace, info.name, int(grace_s))
        except ApiError as exc:
            log.warning("deleting pod %s failed: %s", key, exc)

    def _bind(self, action: Bind) -> None:
        self._run[action.job_id] = action.run
        keys = self.members.get(action.job_id, [])
        for task, placement in action.placements:
            key = keys[task] if task < len(keys) else ""
            obj = self.pods.get(key)
            if obj is None:
                self._followups.append(
                    TaskFinished(action.job_id, task, action.run, False, "pod gone before bind")
                )
                continue
            info = pod_info(obj)
            # the assignment travels in the Binding: set with spec.nodeName in one update,
            # so a binding that fails (409 or any error) leaves no annotation behind
            annotations = assignment_annotations(obj, placement) if placement.devices else None
            try:
                won = self.api.bind(
                    info.namespace, info.name, info.uid, placement.node, annotations
                )
            except ApiError as exc:
                log.warning("binding %s to %s failed: %s", key, placement.node, exc)
                self._report(obj, f"binding to {placement.node} failed: {exc}")
                self._drop(action.job_id, task, action.run, key, f"bind failed: {exc}")
                continue
            if not won:
                # 409: someone else bound it first. Drop our allocation; the watch shows
                # where it went, and it is accounted there like any bound pod.
                log.info("pod %s was bound by someone else (409)", key)
                self.conflicts.append(key)
                self._lost.add(key)
                self._drop(action.job_id, task, action.run, key, "bound by someone else (409)")
                continue
            self.bound.append((key, placement.node))
            self._reported.pop(key, None)
            self._event(
                obj,
                "Normal",
                "Scheduled",
                f"Successfully assigned {key} to {placement.node}",
                action="Binding",
            )

    def _drop(self, job_id: str, task: int, run: int, key: str, reason: str) -> None:
        self.owner.pop(key, None)
        if len(self.members.get(job_id, [])) == 1:
            self._followups.append(JobCancelled(job_id, reason))
        else:
            # the rest of the gang keeps its placements; this task holds nothing any more
            self._followups.append(TaskFinished(job_id, task, run, True, reason))
        # once our allocation is gone, account the pod where it went (if already seen)
        self._recheck.append(key)

    # -- events --------------------------------------------------------------------------

    def _report(self, obj: Obj, message: str) -> None:
        """A FailedScheduling Warning on the pod, unless the same message was just posted."""
        key = pod_info(obj).key
        message = message[:_MESSAGE_LIMIT]
        if self._reported.get(key) == message:
            return
        self._reported[key] = message
        self._event(obj, "Warning", "FailedScheduling", message)
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

    def _event(
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
            "source": {"component": self.name},
            "reportingComponent": self.name,
            "reportingInstance": self.identity,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        with contextlib.suppress(ApiError):
            self.api.create_event(namespace, event)


def run_leading(sched: PodScheduler, lock: LeaseLock, stop: threading.Event) -> int:
    """Wait for the lease, then sync, watch and schedule while renewing it every retry
    period, until ``stop`` (returns 0) or the lease is lost (returns 1: the process should
    exit and start over, as kube-scheduler does, rather than act on a stale view)."""
    while not stop.is_set() and not _attempt(lock):
        stop.wait(lock.retry_period_s)
    if stop.is_set():
        return 0
    sched.sync()
    sched.start_watches()
    renew_at = lock.clock() + lock.retry_period_s
    try:
        while not stop.is_set():
            sched.step(min(1.0, lock.retry_period_s))
            if lock.clock() >= renew_at:
                if not _attempt(lock):
                    log.error("lost the lease %s/%s; stopping", lock.namespace, lock.name)
                    return 1
                renew_at = lock.clock() + lock.retry_period_s
    finally:
        sched.stop()
        with contextlib.suppress(ApiError):
            lock.release()
    return 0


def _attempt(lock: LeaseLock) -> bool:
    try:
        return lock.try_acquire_or_renew()
    except ApiError as exc:
        log.warning("lease %s/%s: %s", lock.namespace, lock.name, exc)
        if lock.leading and lock.lost():
            lock.leading = False
        return lock.leading
