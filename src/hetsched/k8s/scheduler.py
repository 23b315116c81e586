"""The Kubernetes scheduler: a driver of the core over the API server.

It keeps a list+watch cache of nodes and of all pods, turns changes into core events, and
carries out the actions the core returns through the shared interpreter
(:mod:`hetsched.drivers`), whose executor here binds and deletes pods:

- a pending pod with ``spec.schedulerName`` ours is a JobSubmitted (the pods of one pod
  group are one job, submitted once ``hetsched.io/min-available`` of them exist; pods of a
  group that arrive after it was submitted are scheduled one by one);
- a bound pod we did not bind (another scheduler's, or ours before a restart) is taken
  back with ``Scheduler.restore`` on its node, so it counts as allocated; at a (re)start
  the bound pods of a pod group are taken back as one job (:mod:`hetsched.k8s.takeback`);
- a pod reaching Succeeded/Failed is reported as the task's exit; a pending pod deleted is
  a JobCancelled, a running one an exit that failed (a gang then stops as a whole);
- nodes: NodeAdded, NodeRemoved, and DeviceHealthChanged/DeviceAdded from the device
  annotation (other node changes are not followed);
- Bind: the job's pods are bound all or nothing, off the scheduling loop when
  ``bind_workers`` > 0 (:mod:`hetsched.k8s.podexec`, :mod:`hetsched.k8s.binding`); a
  binding that fails requeues the job (StartFailed) and deletes the members bound so far;
- Kill and Preempt: delete the pods with a grace period; a checkpointable job's pods get a
  preemption notice first (:mod:`hetsched.k8s.notices`), and the checkpoints pods report
  reach the core (:mod:`hetsched.k8s.reports`). A preempted job goes back to the
  core's queue, as everywhere: the pods its controller (a Job, a ReplicaSet, ...) or its pod
  group recreates are matched to it, task by task, instead of becoming new jobs; a job whose
  pods nothing recreates (bare pods) is cancelled once they are gone, and one whose pods
  are not recreated within ``recreate_timeout_s`` too. The preemptor's pending pods get
  ``status.nominatedNodeName`` (the victims' nodes) until they bind or the core gives up
  on them (:mod:`hetsched.k8s.nominate`);
- Pending and Reject: a ``FailedScheduling`` Warning event whose message is the
  explanation.

It reads the core only through ``Scheduler.view``; what it knows of jobs (their states and
runs) comes from the core's JobTransition actions. Decisions are taken one batch at a time
on the caller's thread (:meth:`step`); the watches and the binding workers run on their own
threads, feeding it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import ClusterState
from hetsched.drivers import Interpreter, Observer, in_order
from hetsched.framework.profile import ProfileSpec
from hetsched.framework.speeds import load_speed_table
from hetsched.k8s.api import ClusterAPI
from hetsched.k8s.binding import Binder
from hetsched.k8s.claims.book import claim_refs
from hetsched.k8s.claims.requests import ClaimError
from hetsched.k8s.claims.side import DRA_RESOURCES, ClaimSide, device_events
from hetsched.k8s.fencing import LeaseFencing
from hetsched.k8s.fencing import federation_of as _federation
from hetsched.k8s.leading import run_leading
from hetsched.k8s.listwatch import Change, ListWatch
from hetsched.k8s.membership import Membership
from hetsched.k8s.names import SCHEDULER_NAME
from hetsched.k8s.nominate import Nominations
from hetsched.k8s.podevents import PodEvents
from hetsched.k8s.podexec import PodExecutor
from hetsched.k8s.recreate import workload_of
from hetsched.k8s.reports import CheckpointReports
from hetsched.k8s.takeback import TakeBack
from hetsched.k8s.translate import (
    PodInfo,
    TranslateError,
    pod_info,
    pod_job,
)
from hetsched.keys import TaskKey
from hetsched.model.device import Node
from hetsched.model.lifecycle import TERMINAL, JobState
from hetsched.scheduler import (
    Event,
    JobSubmitted,
    JobTransition,
    Migrate,
    NodeAdded,
    NodeRemoved,
    Pending,
    Reject,
    Scheduler,
    Tick,
)

__all__ = ["PodScheduler", "run_leading"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: seconds a killed pod gets to stop (a Preempt carries its own grace)
KILL_GRACE_S = 30.0


def _short(uid: str) -> str:
    return f"#{uid[:8]}" if uid else ""


class PodScheduler(Membership, Observer):
    """A secondary scheduler for the pods naming ``scheduler_name``.

    ``clock`` gives the core's time in seconds (monotonic by default). ``identity`` names
    this instance in events (``reportingInstance``). ``bind_workers`` threads bind pods off
    the scheduling loop (0: on it, as each Bind is carried out; see
    :mod:`hetsched.k8s.binding`); ``event_queue`` > 0 posts Events off them too, dropping
    what overflows that many (:class:`~hetsched.k8s.podevents.PodEvents`). The scheduler is
    the interpreter's Observer (what the core says about jobs);
    :class:`~hetsched.k8s.podexec.PodExecutor` is its executor.
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
        recreate_timeout_s: float = 300.0,
        bind_workers: int = 0,
        event_queue: int = 0,
        topology_levels: Sequence[str] = (),
    ) -> None:
        self.api = api
        self.name = scheduler_name
        self.identity = identity
        self.clock = clock
        state = ClusterState()
        if topology_levels:  # network levels: node labels, broadest first
            state.set_topology(topology_levels)
        self.core = Scheduler(state, profile, seed)
        # job types resolve in the profile's throughput table (the speed score, upgrades)
        self.core.speed_table = load_speed_table(profile.speeds) if profile else None
        self.events = PodEvents(api, scheduler_name, identity, event_queue)
        self.nominations = Nominations(api)
        #: the cache: the latest JSON of every node and pod
        self.nodes: dict[str, Obj] = {}
        self._node_models: dict[str, Node] = {}
        self.pods: dict[str, Obj] = {}
        self._init_membership(recreate_timeout_s)
        #: bound pods taken back as jobs (the pods of a group as one, during a sync)
        self.takeback = TakeBack(self)
        self._syncing = False
        self.followups: list[Event] = []
        self._moving: list[str] = []  # jobs whose Migrate was carried out this round
        self.rechecks: list[str] = []
        #: Dynamic Resource Allocation: the claims of our pods, the slices' devices
        self.dra = ClaimSide(self)
        caches = {"nodes": self.nodes, "pods": self.pods, **self.dra.caches}
        self.watch = ListWatch(api, caches, watch_timeout_s, optional=DRA_RESOURCES)
        self.executor = PodExecutor(self, bind_workers)
        self.interpreter = Interpreter(self.executor, self, kill_grace_s=KILL_GRACE_S)
        self.reports = CheckpointReports(self)
        #: held while a batch is applied
        self.lock = threading.RLock()
        #: federations' leases (k8s/fencing.py): their pods run only while one is live
        self.fencing: LeaseFencing | None = None
        #: pods of a federation held back until its lease is live
        self._held: set[str] = set()

    @property
    def api(self) -> ClusterAPI:
        return self._api

    @api.setter
    def api(self, api: ClusterAPI) -> None:
        """Every part that calls the API server calls this one (tests put a wrapper in)."""
        self._api = api
        for part in ("events", "nominations", "binder"):
            if hasattr(self, part):
                getattr(self, part).api = api

    # -- the loop ------------------------------------------------------------------------

    def sync(self) -> None:
        """List nodes and pods and bring the cache (and the core) up to date with them.

        On a fresh instance this is the rebuild after a restart: bound pods are restored
        where they run (the bound pods of a pod group as one job), pending ones submitted."""
        self._syncing = True
        try:
            self.process(self.watch.snapshot())
        finally:
            self._syncing = False
        self.dra.sweep()

    def start_watches(self) -> None:
        self.watch.start()

    def stop(self) -> None:
        """Stop the watches, wait for the bindings in flight, and let the Events queued
        be written."""
        self.watch.stop()
        self.binder.close()
        self.events.close()

    @property
    def _rv(self) -> dict[str, str]:
        """The resource versions the watches resume from."""
        return self.watch.rv

    def step(self, timeout_s: float = 1.0) -> None:
        """Wait up to ``timeout_s`` for changes, then handle everything queued (and the
        core's timers, pods overdue for recreation and notices that end, when due)."""
        deadline = self.executor.notices.next_deadline()
        wait_s = timeout_s if deadline is None else min(timeout_s, deadline - self.clock())
        changes = self.watch.changes(max(0.0, wait_s))
        if self.fencing is not None:
            changes += self._fence()
        wakeup = self.core.next_wakeup()
        due = wakeup is not None and wakeup <= self.clock()
        due = due or (deadline is not None and deadline <= self.clock())
        busy = self.followups or self.binder.finished()
        if changes or busy or due or self.vacant.due(self.clock()):
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

    # -- changes into events -------------------------------------------------------------

    def process(self, changes: list[Change]) -> None:
        """Apply changes (nodes first, then pods), run the core, carry out its actions.

        Holds :attr:`lock`, so a reader of the core (the extender) sees whole batches."""
        with self.lock:
            self._process(changes)

    def _process(self, changes: list[Change]) -> None:
        """Two batches: the DRA objects and node changes first (so pods bound to new nodes
        can be restored on them), then pod changes; each in the drivers' one order. Then
        the claim jobs (:meth:`ClaimSide.reconcile`)."""
        now = self.clock()
        dra, slices = self.dra.apply([c for c in changes if c[0] in DRA_RESOURCES])
        events: list[Event] = []
        for resource, kind, obj in changes:
            if resource == "nodes":
                events += self._node_change(kind, obj)
        if slices:
            events += self.dra.devices_changed(self._node_models, self.nodes)
        self._handle(events, now)
        events = []
        pods = [(kind, obj) for resource, kind, obj in changes if resource == "pods"]
        if dra:  # pods waiting for their claims: look again
            pods += [("MODIFIED", self.pods[k]) for k in sorted(self.dra.waiting) if k in self.pods]
        for kind, obj in pods:
            try:
                events += self._pod_change(kind, obj)
            except TranslateError as exc:
                self.events.failed_scheduling(obj, str(exc))
        self.takeback.groups()
        events += self._submit_groups(now)
        events += self._expired_vacancies(now)
        self._handle(events or [Tick()], now)
        ended = self.dra.reconcile()
        if ended:
            self._handle(ended, now)

    def _handle(self, events: list[Event], now: float) -> None:
        """Run the core and carry out its actions; what carrying them out reports at once
        (a pod already gone, a bind lost) goes to the core in the next round."""
        self.executor.expire(now)
        self.executor.settle()
        events = self.followups + events
        self.followups = []
        while events:
            actions = self.core.handle(in_order(events), now)
            self.interpreter.carry_out(actions, now)
            moving, self._moving = self._moving, []
            for job_id in moving:
                self.followups += self._vacate(job_id, now)
            self.executor.settle()
            events, self.followups = self.followups, []
        self.nominations.apply(self._pending_pods, self._waits_for_room, self.owner)
        recheck, self.rechecks = self.rechecks, []
        for key in recheck:
            obj = self.pods.get(key)
            if obj is not None and key not in self.owner:
                info = pod_info(obj)
                if info.node_name and not info.terminal:
                    self.takeback.pod(info, obj)

    def _node_change(self, kind: str, obj: Obj) -> list[Event]:
        name = str(obj.get("metadata", {}).get("name", ""))
        if kind == "DELETED":
            self.nodes.pop(name, None)
            if self._node_models.pop(name, None) is not None:
                return [NodeRemoved(name, "node deleted")]
            return []
        self.nodes[name] = obj
        try:
            node = self.dra.node(obj)
        except TranslateError as exc:
            log.warning("%s", exc)
            return []
        old = self._node_models.get(name)
        self._node_models[name] = node
        if old is None:
            return [NodeAdded(node)]
        return device_events(old, node, "device plugin")

    def _pod_change(self, kind: str, obj: Obj) -> list[Event]:
        """A checkpoint the pod reported (:mod:`~hetsched.k8s.reports`), then its change."""
        reported = self.reports.look(pod_info(obj), obj, self.clock(), kind == "DELETED")
        return reported + self._pod_changed(kind, obj)

    def _pod_changed(self, kind: str, obj: Obj) -> list[Event]:
        info = pod_info(obj)
        ours = info.scheduler_name == self.name
        if ours and (kind == "DELETED" or info.terminal) and claim_refs(obj):
            self.dra.ended(obj)  # its claims are given back
        if kind == "DELETED":
            self.pods.pop(info.key, None)
            return self._pod_gone(info.key)
        self.pods[info.key] = obj
        owned = self.owner.get(info.key)
        if owned is not None:
            return self._owned_change(info, owned)
        if info.key in self.executor.stopping:
            if info.terminal:  # it ended inside its notice: delete it now
                self.executor.end_notice(info.key)
            return []
        if info.key in self.executor.lost:
            # we lost its bind race: wait for the object that shows where it went (a watch
            # may still deliver older versions that show it unbound)
            if not info.node_name:
                return []
            self.executor.lost.discard(info.key)
        if info.schedulable_by(self.name) and self._held_by_lease(info, obj):
            return []
        if info.schedulable_by(self.name) and self._fill(info, obj):
            return []
        if info.group is not None and info.schedulable_by(self.name):
            self._groups.add(f"{info.namespace}/{info.group}", info.key)
            return []
        if info.schedulable_by(self.name):
            job = pod_job(obj, info.key + _short(info.uid), self.clock())
            try:
                resources = self.dra.book.request(info.key, obj, job.resources)
            except ClaimError as exc:
                self.dra.waiting.add(info.key)
                self.events.failed_scheduling(obj, str(exc))
                return []
            if resources is not job.resources:  # its claims' part
                job = dataclasses.replace(job, resources=resources)
            self.dra.waiting.discard(info.key)
            self._own(job.id, [info.key], workload_of(obj, info))
            return [JobSubmitted(job)]
        if info.node_name and not info.terminal and not info.deleting:
            if info.group is not None and self._syncing:
                self.takeback.later(f"{info.namespace}/{info.group}", info.key)
            else:
                self.takeback.pod(info, obj)
        return []

    def _fence(self) -> list[Change]:
        """Renew the federations' leases; delete every pod of one whose lease lapsed; let
        pods held back for want of a lease be scheduled once it is live."""
        fencing = self.fencing
        assert fencing is not None
        fencing.step(self.api, self.pods.values(), self.events.post)
        again = [
            k for k in self._held if k in self.pods and fencing.live(_federation(self.pods[k]))
        ]
        self._held.difference_update(again)
        self._held &= self.pods.keys()
        return [("pods", "MODIFIED", self.pods[k]) for k in sorted(again)]

    def _held_by_lease(self, info: PodInfo, obj: Obj) -> bool:
        """A federation's pod waits while that federation holds no live lease here."""
        name = _federation(obj)
        if not name or self.fencing is None or self.fencing.live(name):
            return False
        self._held.add(info.key)
        self.events.failed_scheduling(obj, f"waiting for a live lease of federation {name}")
        return True

    def assume(self, obj: Obj) -> None:
        """Account a pod someone just bound (the extender), before the watch shows it."""
        info = pod_info(obj)
        if info.key not in self.owner:
            self.takeback.pod(info, obj)

    def group_started(self, group: str) -> None:
        """Pods of ``group`` that come from now on are scheduled one by one."""
        self._groups.started.add(group)

    def adopt(
        self, job_id: str, keys: list[str], placements: dict[int, Placement], workload: str | None
    ) -> None:
        """A job the core took back (``Scheduler.restore``) runs on ``keys``' pods."""
        self._own(job_id, keys, workload)
        self._run[job_id] = 1
        self._state[job_id] = JobState.RUNNING
        for key in (k for k in keys if k in self.pods):  # notices from before a restart
            self.executor.notices.withdraw(self.api, pod_info(self.pods[key]), self.pods[key])
        for task, placement in placements.items():
            self.interpreter.adopt(TaskKey(job_id, task, 1), placement)

    # -- what the core says about jobs (the interpreter's Observer) ----------------------

    def transitioned(self, change: JobTransition) -> None:
        job_id = change.job_id
        self._state[job_id] = change.target
        self._run[job_id] = change.run
        if change.target in TERMINAL:
            self.vacant.drop(job_id)
        elif change.target is JobState.PENDING and change.source is JobState.RUNNING:
            self.followups += self._vacate(job_id, change.time)

    def pending(self, action: Pending) -> None:
        for key in self._pending_pods(action.job_id):
            self.events.failed_scheduling(self.pods[key], str(action.explanation))

    def rejected(self, action: Reject) -> None:
        for key in self._pending_pods(action.job_id):
            self.events.failed_scheduling(self.pods[key], f"rejected: {action.reason}")

    def migrating(self, action: Migrate) -> None:
        """Pods cannot move: once stopped, they wait to be recreated (as a preempted job's),
        then bound where the core moved the job. Bare pods are never moved (their job is
        not movable, ``pod_job``); should one be, its job is cancelled once it is gone."""
        self._moving.append(action.job_id)

    # -- what the executor reads and tells ---------------------------------------------

    def started_run(self, job_id: str, run: int) -> None:
        self._run[job_id] = run

    def running_run(self, job_id: str) -> int | None:
        """The job's current run while it runs (None otherwise)."""
        return self._run.get(job_id) if self._state.get(job_id) is JobState.RUNNING else None

    @property
    def binder(self) -> Binder:
        return self.executor.binder

    @property
    def bound(self) -> list[tuple[str, str]]:
        """Every bind this instance carried out: (pod key, node)."""
        return self.executor.bound

    @property
    def conflicts(self) -> list[str]:
        """Pods whose bind this instance lost (409)."""
        return self.executor.conflicts
