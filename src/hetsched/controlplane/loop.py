"""The reconcile loop: the one thread that runs turns of ``hetsched up``.

Each turn:
  1. collect events: submissions and cancellations from the API (already committed by it),
     device changes from the watcher, task exits from the launcher;
  2. plan: the turn planner runs the core and carries out its actions on paper
     (:mod:`hetsched.controlplane.planner`): tasks to start and to stop, what jobs became;
  3. commit the plan in one transaction (``Store.record_turn``);
  4. only then carry it out: the launcher spawns processes and signals process groups;
  5. commit the pids and start times of what was spawned.

A crash between 3 and 5 leaves tasks ``starting`` without a pid: recovery treats them as
lost and sweeps away any process that carries their key. A crash before 3 loses only
decisions, which the rebuilt core takes again. Tasks that could not start, and stops of
tasks with no process, are reported as exits in the next turn. With the local executor a
turn that only starts tasks commits without waiting for the disk (``Store.record_turn``):
a power loss that undoes such a commit also ends the tasks it started, which is a crash
before 3; a turn that records anything else (an exit, a stop, a job's end) is durable.

When turns run: at once when the API commits a submission or a cancel, when a task's
process ends (the executor's exit watcher, agent/exits.py), when the device watcher reports
a change; otherwise the loop sleeps until the first of the core's ``next_wakeup()``, a
SIGKILL due after a grace or a maximum runtime (the executor's ``next_due()``), the guard's
next round, a federation lease's expiry, the views' refresh and the dashboard's next history
sample. There is no fixed tick: a turn with nothing to report and no rule of the core due
does not call the core. Under load (events arrived during a turn) the loop pauses as long as
the turn took before the next one, which batches a burst into one turn and one commit.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from hetsched.agent.checkpoints import Report
from hetsched.agent.executor import Executor, RunAs, TaskExit
from hetsched.agent.guard import Guard
from hetsched.agent.progress import Progress
from hetsched.agent.protocol import ProcessExecutor
from hetsched.agent.watcher import NodeWatcher
from hetsched.controlplane.checkpointing import CheckpointProtocol
from hetsched.controlplane.faults import TurnFaults
from hetsched.controlplane.fencing import Fencing
from hetsched.controlplane.launcher import Launcher
from hetsched.controlplane.loopmetrics import LoopMetrics
from hetsched.controlplane.planner import TurnPlan, TurnPlanner
from hetsched.controlplane.recovery import Recovered, recover
from hetsched.controlplane.schemas import SubmitSpec, from_stored
from hetsched.controlplane.speedlearn import Estimate, SpeedLearner
from hetsched.controlplane.storage.store import Store
from hetsched.controlplane.views import node_view, quota_view
from hetsched.drivers import Stop
from hetsched.keys import TaskKey
from hetsched.model.device import Device, Node
from hetsched.model.job import Job
from hetsched.model.lifecycle import TERMINAL
from hetsched.model.speed import job_devices
from hetsched.scheduler import (
    Action,
    Event,
    JobCancelled,
    JobSubmitted,
    NodeAdded,
    NodeRemoved,
    Scheduler,
)
from hetsched.scheduler.view import SchedulerView

__all__ = ["ControlLoop"]

log = logging.getLogger(__name__)

#: the API's node and quota views lag the core by at most this after a change (seconds)
_REFRESH_S = 0.5
#: how often exits are polled while tasks run where the executor cannot report them
_EXIT_POLL_S = 0.1


class ControlLoop:
    """Runs turns; the API talks to it only through :meth:`submitted`, :meth:`cancelled`
    and the views it refreshes, after committing."""

    def __init__(
        self,
        store: Store,
        scheduler: Scheduler,
        executor: ProcessExecutor,
        nodes: Iterable[Node],
        run_as: dict[str, RunAs] | None = None,
        tick_s: float = math.inf,
        make_core: Callable[[], Scheduler] | None = None,
        watcher: NodeWatcher | None = None,
        guard: Guard | None = None,
        fencing: Fencing | None = None,
        checkpoints: CheckpointProtocol | None = None,
        speeds: SpeedLearner | None = None,
    ) -> None:
        self.store = store
        self.executor = executor
        self.planner = TurnPlanner(scheduler, executor.kill_grace_s)
        self.launcher = Launcher(executor, list(nodes), run_as, guard, fencing, checkpoints)
        if checkpoints is not None:
            checkpoints.deliver = self.checkpointed
            checkpoints.deliver_progress = self.progressed
        #: checkpoints reported through the API, for the next turn
        self._reports: list[tuple[TaskKey, Report]] = []
        #: progress reported through the API, for the next turn
        self._progress: list[tuple[TaskKey, Progress]] = []
        #: learns per-(job type, model) speeds from progress; its table is the core's
        self.speeds = speeds
        #: federations' leases (controlplane/fencing.py): their jobs stop when one lapses
        self.fencing = fencing
        #: jobs cancelled because their federation's lease lapsed, until they end
        self._fence_cancelled: set[str] = set()
        #: builds a fresh core with the nodes added, for rebuilding after a failed turn
        self.make_core = make_core
        #: a fixed tick on top of the core's wakeups (none by default; tests set it)
        self.tick_s = tick_s
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: events and exits for the next turn (recovery's, failed starts, empty stops)
        self._events: list[Event] = []
        self._exits: list[TaskExit] = []
        self._last_tick = 0.0
        self.lock = threading.Lock()
        #: the node view the API serves, refreshed by the loop
        self.nodes_view: list[dict[str, Any]] = []
        #: the core's quota tree with usage, refreshed by the loop (empty without one)
        self.quota_view: dict[str, dict[str, dict[str, float]]] = {}
        self._nodes_at = 0.0
        #: the core changed since the views were last refreshed
        self._dirty = True
        self.turns = 0
        #: the nodes' watcher (this machine's hot-plug and health, or a Ray cluster's
        #: nodes); its events come in through :meth:`device_events`
        self.watcher = watcher
        if watcher is not None:
            watcher.sink = self.device_events
        #: counters, histograms and the dashboard's history (controlplane/loopmetrics.py)
        self.metrics = LoopMetrics()
        #: failed turns: alerts, jobs held back, the wedge (controlplane/faults.py)
        self.faults = TurnFaults()
        self.metrics.watch_faults(self.faults)
        #: the jobs the turn in progress concerns (held back if it fails)
        self._concerns: set[str] = set()
        # a task's process that ends wakes the loop at once (where pidfds work)
        executor.on_exit = self._wake.set
        #: the tasks are this machine's processes: a power loss ends them with the service,
        #: so recording their start need not wait for the disk (Store.record_turn)
        self._tasks_here = isinstance(executor, Executor)

    @property
    def view(self) -> SchedulerView:
        """The core as the routes and metrics may read it (with :attr:`lock` held)."""
        return self.planner.core.view

    @property
    def guard(self) -> Guard | None:
        return self.launcher.guard

    @property
    def devices(self) -> dict[str, Device]:
        return self.launcher.devices

    # -- the API side --------------------------------------------------------------------

    def submitted(
        self, row: dict[str, Any], spec: SubmitSpec | None = None, job: Job | None = None
    ) -> None:
        """A job row the API has committed, with the spec it validated from the row's body
        and the job it built from it (then the loop need not validate nor build them
        again; a job whose id or submit time is not the row's is built again)."""
        self._inbox.put(("submit", (row, spec, job)))
        self._wake.set()

    def cancelled(self, job_id: str, user: str) -> None:
        self._inbox.put(("cancel", (job_id, user)))
        self._wake.set()

    @property
    def checkpoints(self) -> CheckpointProtocol | None:
        return self.launcher.checkpoints

    def checkpointed(self, key: TaskKey, report: Report) -> None:
        """A task reported a checkpoint through the API (its token checked)."""
        self._inbox.put(("checkpoint", (key, report)))
        self._wake.set()

    def progressed(self, key: TaskKey, progress: Progress) -> None:
        """A task reported its job's progress through the API (its token checked)."""
        self._inbox.put(("progress", (key, progress)))
        self._wake.set()

    def device_events(self, events: list[Event]) -> None:
        """Nodes joining and leaving, hot-plug and health changes, from the watcher (called
        from its thread)."""
        self._inbox.put(("devices", events))
        self._wake.set()

    # -- lifecycle -----------------------------------------------------------------------

    def recover(self, now: float | None = None) -> None:
        """Rebuild the core from the store (see ``service.recovery``); its findings are the
        next turn's input."""
        found = recover(self.store, self.planner.core, self.executor, now)
        self._take(found)

    def _take(self, found: Recovered) -> None:
        for job, spec in found.jobs:
            self.launcher.know(job, spec)
        for key, placement in found.adopted:
            self.planner.adopt(key, placement, found.runs.get(key.job))
        self.planner.reserve(found.moving)
        gone = self._resume_notices(found)
        waiting = {e.job.id for e in found.events if isinstance(e, JobSubmitted)}
        self.faults.keep_only(waiting)
        self._events = [e for e in found.events if not self._hold(e)]
        self._exits = list(found.exits) + gone

    def _resume_notices(self, found: Recovered) -> list[TaskExit]:
        """Tasks adopted in their notice go on with it: the task gets its notice again (the
        notice file, the signal) with what is left of it, so SIGTERM follows at the deadline
        it was first given (at once when that has passed); the grace after SIGTERM is the
        service's kill grace (one whose process ended meanwhile has its exit reported
        already). Their report files, and those of the running tasks adopted, are watched
        again."""
        now = time.time()
        grace = self.executor.kill_grace_s
        stops = []
        for noticed in found.stopping:
            key, placement = noticed.key, noticed.placement
            stop = Stop(key, placement, max(0.0, noticed.deadline - now), grace, noticed.reason)
            self.planner.adopt(key, placement, found.runs.get(key.job), stop, noticed.stopped_at)
            if noticed.alive:
                stops.append(stop)
        if self.launcher.checkpoints is not None:
            jobs = {key.job for key, _ in found.adopted} | {n.key.job for n in found.stopping}
            for job_id in sorted(jobs):
                self.launcher.checkpoints.watcher.watch(job_id)
        return self.launcher.signal(stops, now)

    def _hold(self, event: Event) -> bool:
        """Whether ``event`` concerns a job held back after a failed turn (it is not given
        to the core); a held job whose cancel was asked for is cancelled here."""
        if isinstance(event, JobSubmitted):
            return self.faults.is_held(event.job.id)
        if isinstance(event, JobCancelled) and self.faults.release(event.job_id) is not None:
            self.store.end_waiting_job(event.job_id, "cancelled", event.reason, time.time())
            self.launcher.forget(event.job_id)
            return True
        return False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hetsched-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.perf_counter()
            if self.faults.wedged is not None:
                self._rebuild([])
            else:
                try:
                    self.turn()
                except Exception as exc:
                    self._failed(exc)
                else:
                    self.metrics.turn_done(time.time())
                    self.faults.succeeded()
                    self._release_held()
            if self._stop.wait(self.faults.delay()):
                return
            self._sleep(time.perf_counter() - began)

    def _sleep(self, turn_s: float) -> None:
        """Until something happens or is due (see the module docstring)."""
        if self._wake.is_set():
            # events came during the turn: the loop is busy. A pause as long as the turn
            # batches the next burst into one turn (one cycle, one commit) and leaves the
            # API at least half of the interpreter
            time.sleep(min(0.2, turn_s))
        else:
            self._wake.wait(self._until_due(time.time()))
        self._wake.clear()

    def _until_due(self, now: float) -> float:
        """Seconds until the loop has something to do without being woken."""
        due = [now + self.metrics.history.interval_s, self.metrics.history.next_due()]
        due.append(self.planner.core.next_wakeup())
        due.append(self.launcher.next_due())
        if self._dirty:
            due.append(self._nodes_at + _REFRESH_S)
        lapse = self.fencing.next_lapse_s() if self.fencing is not None else None
        if lapse is not None:
            due.append(now + lapse)
        if self.executor.handles and not self.executor.exits_reported:
            due.append(now + _EXIT_POLL_S)  # no pidfds here: poll while tasks run
        if self.tick_s != math.inf:
            due.append(self._last_tick + self.tick_s)
        return max(0.0, min(t for t in due if t is not None) - now)

    def _failed(self, exc: Exception) -> None:
        """A turn raised: alert, hold the jobs it concerned, rebuild from the store."""
        now = time.time()
        self.metrics.turn_failed()
        error = f"{type(exc).__name__}: {exc}"[:500]
        alert, give_up = self.faults.failed(error, self._concerns, now)
        if self.faults.consecutive == 1:
            log.error("%s; rebuilding the core from the store", alert.message, exc_info=exc)
        else:
            log.error("%s (%d in a row)", alert.message, self.faults.consecutive)
        self._rebuild(give_up)

    def _rebuild(self, give_up: list[str]) -> None:
        """A fresh core from the store, as a restart builds it (the store is the truth: a
        decision the failed turn took was not committed). Jobs in ``give_up`` fail first.
        If the store and the new core cannot be made to agree, the loop is wedged: it
        schedules nothing until a later rebuild succeeds."""
        now = time.time()
        if self.make_core is None:
            return
        try:
            self.executor.shutdown()
            # API submissions already queued are in the store: recovery replays them. Node
            # and device changes are in the fresh core (make_core reads the watcher's
            # present); the launcher learns their devices. Drained before the core is made,
            # so a change that comes in between reaches it as an event.
            while True:
                try:
                    kind, payload = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if kind == "devices":
                    for event in payload:
                        self.launcher.device_event(event)
            with self.lock:
                self.planner = TurnPlanner(self.make_core(), self.executor.kill_grace_s)
            self.launcher.jobs.clear()
            for job_id in give_up:
                alert = self.faults.gave_up(job_id, now)
                self.store.end_waiting_job(job_id, "failed", alert.message, now)
                log.error("%s", alert.message)
            self.recover()
        except Exception as exc:
            alert = self.faults.wedge(f"{type(exc).__name__}: {exc}"[:1000], now)
            log.error("%s; retrying in %.1fs", alert.message, self.faults.delay() or 0.1)
            self.faults.consecutive += 1
            return
        recovered = self.faults.rebuilt(now)
        if recovered is not None:
            log.warning("%s", recovered.message)

    def _release_held(self) -> None:
        """After a turn that succeeded, give the core back one held job, alone."""
        job_id = self.faults.release()
        if job_id is None:
            return
        row = self.store.job(job_id)
        if row is None or row["state"] != "pending":
            return
        spec = from_stored(row["spec"])
        job = spec.to_job(row["id"], row["owner"], float(row["submitted_at"]))
        self.launcher.know(job, spec)
        queued = self.store.queue_times(job_id).get(job_id)
        self._events.append(JobSubmitted(job, int(row["run"]), int(row["restarts"]), queued))
        self._wake.set()

    # -- one turn ------------------------------------------------------------------------

    def turn(self, now: float | None = None) -> list[Action]:
        """One turn (see the module docstring); returns the core's actions."""
        now = time.time() if now is None else now
        events = self._collect()
        self._concerns = _jobs_named(events)
        alerts = self.launcher.guard_round(now, self.planner.running())
        self.store.record_alerts(alerts)
        if any(a.killed for a in alerts):
            self._wake.set()
        exits, self._exits = [*self._exits, *self.launcher.poll(now)], []
        reports, self._reports = self._reports, []
        progress, self._progress = self._progress, []
        protocol = self.launcher.checkpoints
        if protocol is not None:
            reports += protocol.reports(self.planner.live())
            progress += protocol.progress(self.planner.live())
        self._learn(progress)
        wakeup = self.planner.core.next_wakeup()
        core_due = wakeup is not None and wakeup <= now
        if (
            not events
            and not exits
            and not reports
            and not core_due
            and now - self._last_tick < self.tick_s
        ):
            self._refresh(now)
            return []
        self._last_tick = now
        self._dirty = True
        plan = self._plan(events, exits, reports, now)
        starting = {start.key.job for start in plan.starts}
        self._concerns = starting or self._concerns | {t.job_id for t in plan.transitions}
        self.store.record_turn(exits, plan, starts_die_with_host=self._tasks_here)
        for change in plan.transitions:
            if change.target in TERMINAL:
                self.launcher.forget(change.job_id)
                if self.speeds is not None:
                    self.speeds.forget(change.job_id)
        launched, failed = self.launcher.launch(plan.starts)
        gone = self.launcher.signal(plan.stops, now)
        self.store.record_launched(launched, durable=not self._tasks_here)
        # reported in the next turn: tasks that could not start, stops with no process
        self._exits = [*failed, *gone]
        if self._exits:
            self._wake.set()
        self.turns += 1
        self._refresh(now)
        return plan.actions

    def _collect(self) -> list[Event]:
        events, self._events = self._events, []
        #: node name -> in the cluster, after the node changes collected so far
        nodes: dict[str, bool] = {}
        while True:
            try:
                kind, payload = self._inbox.get_nowait()
            except queue.Empty:
                return [*events, *self._fenced_cancels()]
            if kind == "submit":
                events.append(self._submit_event(*payload))
            elif kind == "checkpoint":
                self._reports.append(payload)
            elif kind == "progress":
                self._progress.append(payload)
            elif kind == "devices":
                events.extend(
                    self.launcher.device_event(e) for e in payload if self._news(e, nodes)
                )
            else:
                job_id, user = payload
                cancel = JobCancelled(job_id, f"cancelled by {user}")
                if not self._hold(cancel):
                    events.append(cancel)

    def _news(self, event: Event, nodes: dict[str, bool]) -> bool:
        """False for a node change the core has already, or will have from an event earlier
        in this batch (``nodes``, updated here): a node that joined while the core was being
        rebuilt is in it and may come as an event too."""
        if not isinstance(event, NodeAdded | NodeRemoved):
            return True
        added = isinstance(event, NodeAdded)
        name = event.node.name if isinstance(event, NodeAdded) else event.name
        known = nodes.get(name)
        if known is None:
            state = self.planner.core.state
            row = state.node_index.get(name)
            known = row is not None and bool(state.active[row])
        if known == added:
            return False
        nodes[name] = added
        return True

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
            self._fence_cancelled.add(job_id)
            self.store.request_cancel(job_id)
            reason = (
                f"fenced: no word from federation {federation} within its lease of "
                f"{lapsed[federation]:g}s"
            )
            out.append(JobCancelled(job_id, reason))
        return out

    def _submit_event(
        self, row: dict[str, Any], spec: SubmitSpec | None, job: Job | None = None
    ) -> Event:
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

    def _plan(
        self,
        events: list[Event],
        exits: list[TaskExit],
        reports: list[tuple[TaskKey, Report]],
        now: float,
    ) -> TurnPlan:
        with self.lock:
            began = time.perf_counter()
            plan = self.planner.plan(events, exits, now, reports)
            pending, _ = self.view.counts()
            self.metrics.observe_turn(
                plan.actions, time.perf_counter() - began, self._queue_of, sum(pending.values())
            )
            self.metrics.observe_checkpoints(plan, self._queue_of)
        return plan

    def _learn(self, progress: list[tuple[TaskKey, Progress]]) -> None:
        """Hand progress reports of running tasks to the speed learner, with the device
        model their task holds; store what changed and give the core the new table."""
        learner = self.speeds
        if learner is None or not progress:
            return
        core = self.planner.core
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
                key.job,
                key.run,
                job.speed.job_type,
                models.pop(),
                job_devices(job),
                report.steps,
                report.at,
            )
            if estimate is not None:
                changed[(estimate.job_type, estimate.model)] = estimate
        if changed:
            self.store.save_speed_estimates(list(changed.values()))
            with self.lock:
                core.speed_table = learner.table()

    def _queue_of(self, job_id: str) -> str:
        known = self.launcher.jobs.get(job_id)
        return known[0].queue if known is not None else ""

    # -- views ---------------------------------------------------------------------------

    def _refresh(self, now: float) -> None:
        """The views the API serves (at most every ``_REFRESH_S`` after a change) and the
        dashboard's history sample (when one is due)."""
        views_due = self._dirty and now - self._nodes_at >= _REFRESH_S
        if not views_due and not self.metrics.history.due(now):
            return
        with self.lock:
            view = self.view
            if views_due:
                # why the watcher last saw a device change ("removed", "unhealthy: XID 79")
                reasons = {d.id: d.reason for d in self.watcher.view()} if self.watcher else {}
                nodes = node_view(view.cluster, reasons)
                self.quota_view = quota_view(view)
            self.metrics.sample(view, now)
        if views_due:
            self._nodes_at = now
            self._dirty = False
            self.nodes_view = nodes


def _jobs_named(events: Iterable[Event]) -> set[str]:
    """The jobs a turn's events submit or cancel."""
    out: set[str] = set()
    for event in events:
        if isinstance(event, JobSubmitted):
            out.add(event.job.id)
        elif isinstance(event, JobCancelled):
            out.add(event.job_id)
    return out
