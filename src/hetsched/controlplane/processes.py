"""The process runner: ``hetsched up``'s tasks as processes of a process executor.

The executor is this machine's (``agent/executor.py``) or the agents on a Ray cluster's
nodes; the launcher (``controlplane/launcher.py``) spawns and signals their processes as a
committed plan says. Around it, what a machine's tasks bring to a turn: their exits (by
callback where pidfds work, else polled), the nodes' watcher (hot-plug, health, Ray nodes
joining and leaving), the overcommit guard, checkpoint and progress reports with the speed
learner, and the leases of federations that send jobs here (a job of a federation whose
lease lapsed is cancelled, saying so).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from hetsched.agent.checkpoints import Report
from hetsched.agent.guard import Guard
from hetsched.agent.progress import Progress
from hetsched.agent.watcher import NodeWatcher
from hetsched.cluster.state import ClusterState
from hetsched.controlplane.checkpointing import CheckpointProtocol
from hetsched.controlplane.fencing import Fencing
from hetsched.controlplane.launcher import Launched, Launcher
from hetsched.controlplane.leadership import Fenced
from hetsched.controlplane.planner import TurnPlan, TurnPlanner
from hetsched.controlplane.recovered import Recovered
from hetsched.controlplane.recovery import recover
from hetsched.controlplane.runner import Before, LoopHandle
from hetsched.controlplane.schemas import SubmitSpec, from_stored
from hetsched.controlplane.speedlearn import Estimate, SpeedLearner
from hetsched.controlplane.storage.store import Store
from hetsched.controlplane.views import node_view
from hetsched.drivers import Exit, KeepsExits, KillsByPid, Stop
from hetsched.drivers.executor import ProcessExecutor, RunAs
from hetsched.keys import TaskKey
from hetsched.model.device import Device, Node
from hetsched.model.job import Job
from hetsched.model.speed import job_devices
from hetsched.scheduler import Event, JobCancelled, JobSubmitted, NodeAdded, NodeRemoved

__all__ = ["ProcessRunner"]

log = logging.getLogger(__name__)

#: how often exits are polled while tasks run where the executor cannot report them
_EXIT_POLL_S = 0.1


class ProcessRunner:
    """The :class:`~hetsched.controlplane.runner.Runner` of ``hetsched up``."""

    live_views = False

    def __init__(
        self,
        executor: ProcessExecutor,
        nodes: Iterable[Node],
        run_as: dict[str, RunAs] | None = None,
        watcher: NodeWatcher | None = None,
        guard: Guard | None = None,
        fencing: Fencing | None = None,
        checkpoints: CheckpointProtocol | None = None,
        speeds: SpeedLearner | None = None,
    ) -> None:
        self.executor = executor
        self.kill_grace_s = executor.kill_grace_s
        self.launcher = Launcher(executor, list(nodes), run_as, guard, fencing, checkpoints)
        #: learns per-(job type, model) speeds from progress; its table is the core's
        self.speeds = speeds
        #: federations' leases (controlplane/fencing.py): their jobs stop when one lapses
        self.fencing = fencing
        #: jobs cancelled because their federation's lease lapsed, until they end
        self._fence_cancelled: set[str] = set()
        #: the nodes' watcher (this machine's hot-plug and health, or a Ray cluster's
        #: nodes); its events come in through the loop's ``device_events``
        self._watcher = watcher
        #: checkpoints and progress reported through the API, for the next turn
        self._reports: list[tuple[TaskKey, Report]] = []
        self._progress: list[tuple[TaskKey, Progress]] = []
        #: the tasks are this machine's processes: a power loss ends them with the service,
        #: so recording their start need not wait for the disk (Store.record_turn)
        self.tasks_here = isinstance(executor, KillsByPid)
        self._loop: LoopHandle | None = None
        #: node name -> in the cluster, after the node changes posted so far this turn
        self._batch: dict[str, bool] = {}
        #: a standby pair's leader: whether it surely still holds its lease (nothing is
        #: started otherwise; controlplane/leadership.py)
        self.leading: Callable[[], bool] | None = None
        #: tasks spawned whose pids the store has not taken yet (it was unavailable)
        self._launched: list[Launched] = []

    @property
    def loop(self) -> LoopHandle:
        assert self._loop is not None, "bind() first"
        return self._loop

    @property
    def guard(self) -> Guard | None:
        return self.launcher.guard

    @property
    def watcher(self) -> NodeWatcher | None:
        return self._watcher

    @property
    def checkpoints(self) -> CheckpointProtocol | None:
        return self.launcher.checkpoints

    @property
    def devices(self) -> Mapping[str, Device]:
        return self.launcher.devices

    def bind(self, loop: LoopHandle) -> None:
        self._loop = loop
        if self._watcher is not None:
            self._watcher.sink = loop.device_events
        checkpoints = self.launcher.checkpoints
        if checkpoints is not None:
            checkpoints.deliver = lambda key, report: loop.post("checkpoint", (key, report))
            checkpoints.deliver_progress = lambda key, steps: loop.post("progress", (key, steps))
        # a task's process that ends wakes the loop at once (where pidfds work)
        self.executor.on_exit = loop.wake

    def start(self) -> None:
        pass

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
        if self._loop is not None and self._loop.store.health.outage is not None:
            # stopping while the store cannot be written: the exits of tasks that ended are
            # journaled for the restart
            self.keep_exits(self.launcher.poll(time.time()))

    def keep_exits(self, exits: list[Exit]) -> None:
        if isinstance(self.executor, KeepsExits):
            self.executor.keep_exits(exits)

    # -- what comes in ---------------------------------------------------------------------

    def submission(
        self, row: dict[str, Any], spec: SubmitSpec | None, job: Job | None
    ) -> JobSubmitted:
        spec = spec if spec is not None else from_stored(row["spec"])
        submitted_at = float(row["submitted_at"])
        if job is None or (job.id, job.submit_time, job.user) != (
            row["id"],
            submitted_at,
            row["owner"],
        ):
            job = spec.to_job(row["id"], row["owner"], submitted_at)
        self.launcher.know(job, spec)
        # queued since the API committed it, as a restart will say
        return JobSubmitted(job, queued_since=job.submit_time)

    def message(self, kind: str, payload: Any, now: float) -> tuple[list[Event], list[Exit]]:
        if kind == "checkpoint":
            self._reports.append(payload)
        elif kind == "progress":
            self._progress.append(payload)
        elif kind == "devices":
            events = [self.launcher.device_event(e) for e in payload if self._news(e)]
            self._record_nodes(events, now)
            return events, []
        return [], []

    def _record_nodes(self, events: list[Event], now: float) -> None:
        """Keep the nodes that joined and left for the history (an outage of the store
        loses these records, not the turn)."""
        joined = [e.node for e in events if isinstance(e, NodeAdded)]
        left = [e.name for e in events if isinstance(e, NodeRemoved)]
        try:
            self.loop.store.record_node_changes(joined, left, now)
        except SQLAlchemyError as exc:
            log.warning("node changes not kept for the history: %s", exc)

    def _news(self, event: Event) -> bool:
        """False for a node change the core has already: a node that joined while the core
        was being rebuilt is in it and may come as an event too. A node's changes come in
        order; the core's state is read as it stands before this turn's events, so a node
        added and removed within one batch keeps both."""
        if not isinstance(event, NodeAdded | NodeRemoved):
            return True
        added = isinstance(event, NodeAdded)
        name = event.node.name if isinstance(event, NodeAdded) else event.name
        known = self._batch.get(name)
        if known is None:
            state = self.loop.planner.core.state
            row = state.node_index.get(name)
            known = row is not None and bool(state.active[row])
        if known == added:
            return False
        self._batch[name] = added
        return True

    def before(self, now: float) -> Before:
        self._batch = {}  # the turn's posts are read
        loop = self.loop
        self._record_launched()
        alerts = self.launcher.guard_round(now, loop.planner.running())
        loop.store.record_alerts(alerts)
        if any(a.killed for a in alerts):
            loop.wake()
        exits = self._fenced_exits(self.launcher.poll(now))
        reports, self._reports = self._reports, []
        progress, self._progress = self._progress, []
        protocol = self.launcher.checkpoints
        if protocol is not None:
            reports += protocol.reports(loop.planner.live())
            progress += protocol.progress(loop.planner.live())
        try:
            self._learn(progress)
            cancels = self._fenced_cancels()
        except Exception:
            # the store refused a write: the exits and reports polled go to the next turn
            loop.later(exits=exits)
            self._reports[:0] = reports
            raise
        return Before(cancels, exits, reports)

    def _fenced_cancels(self) -> list[Event]:
        """Cancel every live job of a federation whose lease has lapsed (once per job; the
        cancel request is stored first, so a restart cancels it too)."""
        lapsed = self.fencing.lapsed() if self.fencing is not None else {}
        known = self.launcher.jobs
        self._fence_cancelled &= known.keys()
        if not lapsed:
            return []
        out: list[Event] = []
        for job_id, (_job, spec) in list(known.items()):
            federation = spec.federation
            if federation not in lapsed or job_id in self._fence_cancelled:
                continue
            self.loop.store.request_cancel(job_id)
            self._fence_cancelled.add(job_id)
            lapse = self.fencing.last_lapse(federation) if self.fencing is not None else None
            reason = (
                f"fenced: no word from federation {federation} within its lease of "
                f"{lapsed[federation]:g}s" + (f" (lapse {lapse[0]})" if lapse else "")
            )
            out.append(JobCancelled(job_id, reason))
        return out

    def _fenced_exits(self, exits: list[Exit], planner: TurnPlanner | None = None) -> list[Exit]:
        """Exits of tasks killed while their federation's lease had lapsed say so: the
        task's watchdog (or this service) stopped it because of that lease. Without this,
        a task the watchdog killed while the service was down ends as "killed by signal
        9" after the restart, with no word of the lease."""
        if self.fencing is None or not exits:
            return exits
        running = (planner or self.loop.planner).running()
        out = []
        for exit_ in exits:
            known = self.launcher.jobs.get(exit_.job_id)
            federation = known[1].federation if known is not None else None
            lapse = self.fencing.last_lapse(federation) if federation else None
            if lapse is None or exit_.exit_code == 0 or exit_.not_started:
                out.append(exit_)
                continue
            placement = running.get(TaskKey(exit_.job_id, exit_.task, exit_.run))
            where = f" on node {placement.node}" if placement is not None else ""
            when = datetime.fromtimestamp(lapse[1], UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            reason = (
                f"fenced: the lease of federation {federation} lapsed here (lapse {lapse[0]}, "
                f"at {when}); its task{where} was stopped ({exit_.reason or 'ended'})"
            )
            out.append(exit_._replace(reason=reason))
        return out

    def _learn(self, progress: list[tuple[TaskKey, Progress]]) -> None:
        """Hand progress reports of running tasks to the speed learner, with the device
        model their task holds; store what changed and give the core the new table."""
        learner = self.speeds
        if learner is None or not progress:
            return
        core = self.loop.planner.core
        changed: dict[tuple[str, str], Estimate] = {}
        for key, report in progress:
            known = self.launcher.jobs.get(key.job)
            record = core.jobs.get(key.job)
            if known is None or record is None or record.run != key.run:
                continue
            placement = record.placements.get(key.task)
            models = (
                {core.state.device_of(s.device_id).model for s in placement.devices}
                if (placement is not None)
                else set()
            )
            if len(models) != 1:
                continue  # no device, or several models: no one model to credit
            job = known[0]
            estimate = learner.observe(
                key.job, key.run, job.speed.job_type, models.pop(), job_devices(job),
                report.steps, report.at,
            )  # fmt: skip
            if estimate is not None:
                changed[(estimate.job_type, estimate.model)] = estimate
        if changed:
            self.loop.store.save_speed_estimates(list(changed.values()))
            with self.loop.lock:
                core.speed_table = learner.table()

    # -- what goes out ---------------------------------------------------------------------

    def annotate(self, plan: TurnPlan, now: float) -> None:
        pass

    def ended(self, job_id: str) -> None:
        self.launcher.forget(job_id)
        if self.speeds is not None:
            self.speeds.forget(job_id)

    def carry_out(self, plan: TurnPlan, now: float) -> list[Exit]:
        if plan.starts and self.leading is not None and not self.leading():
            raise Fenced("this process no longer surely holds its lease: nothing is started")
        launched, failed = self.launcher.launch(plan.starts)
        gone = self.launcher.signal(plan.stops, now)
        if plan.resized:
            self.launcher.resized(plan.resized, now)
        # the next turn's before a write that may fail: not lost if the store refuses it
        self.loop.later(exits=[*failed, *gone])
        self._launched += launched
        self._record_launched()
        return []

    def _record_launched(self) -> None:
        """Record the pids of the tasks spawned (kept for the next turn if the store
        refuses: recovery would find the tasks by their keys anyway)."""
        if self._launched:
            self.loop.store.record_launched(self._launched, durable=not self.tasks_here)
            self._launched = []

    # -- restarts --------------------------------------------------------------------------

    def recover(
        self, store: Store, planner: TurnPlanner, now: float
    ) -> tuple[list[Event], list[Exit]]:
        found = recover(store, planner.core, self.executor, now)
        for job, spec in found.jobs:
            self.launcher.know(job, spec)
        for key, placement in found.adopted:
            planner.adopt(key, placement, found.runs.get(key.job))
        planner.reserve(found.moving)
        gone = self._resume_notices(found, planner, now)
        return list(found.events), self._fenced_exits([*found.exits, *gone], planner)

    def _resume_notices(self, found: Recovered, planner: TurnPlanner, now: float) -> list[Exit]:
        """Tasks adopted in their notice go on with it: the task gets its notice again (the
        notice file, the signal) with what is left of it, so SIGTERM follows at the deadline
        it was first given (at once when that has passed); the grace after SIGTERM is the
        service's kill grace (one whose process ended meanwhile has its exit reported
        already). Their report files, and those of the running tasks adopted, are watched
        again."""
        grace = self.executor.kill_grace_s
        stops = []
        for noticed in found.stopping:
            key, placement = noticed.key, noticed.placement
            stop = Stop(key, placement, max(0.0, noticed.deadline - now), grace, noticed.reason)
            planner.adopt(key, placement, found.runs.get(key.job), stop, noticed.stopped_at)
            if noticed.alive:
                stops.append(stop)
        if self.launcher.checkpoints is not None:
            jobs = {key.job for key, _ in found.adopted} | {n.key.job for n in found.stopping}
            for job_id in sorted(jobs):
                self.launcher.checkpoints.watch(job_id)
        return self.launcher.signal(stops, now)

    def reset(self) -> None:
        self.executor.shutdown()
        self.launcher.jobs.clear()
        self._launched = []

    def drained(self, kind: str, payload: Any) -> None:
        # node and device changes are in the fresh core (make_core reads the watcher's
        # present): the launcher learns their devices
        if kind == "devices":
            for event in payload:
                self.launcher.device_event(event)

    def next_due(self, now: float) -> float | None:
        due = [self.launcher.next_due()]
        lapse = self.fencing.next_lapse_s() if self.fencing is not None else None
        if lapse is not None:
            due.append(now + lapse)
        if self.executor.handles and not self.executor.exits_reported:
            due.append(now + _EXIT_POLL_S)  # no pidfds here: poll while tasks run
        known = [t for t in due if t is not None]
        return min(known) if known else None

    # -- views -----------------------------------------------------------------------------

    def queue_of(self, job_id: str) -> str:
        known = self.launcher.jobs.get(job_id)
        return known[0].queue if known is not None else ""

    def node_view(self, cluster: ClusterState) -> list[dict[str, Any]]:
        # why the watcher last saw a device change ("removed", "unhealthy: XID 79")
        reasons = {d.id: d.reason for d in self._watcher.view()} if self._watcher else {}
        return node_view(cluster, reasons)

    def decorate(self, nodes: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        return nodes
