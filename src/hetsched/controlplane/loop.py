"""The turn loop: the one thread that runs the core of a control plane.

Each turn:
  1. collect events: submissions and cancellations from the API (already committed by it),
     and what the runner heard (node changes, task exits, members' reports);
  2. plan: the turn planner runs the core and carries out its actions on paper
     (:mod:`hetsched.controlplane.planner`): tasks to start and to stop, what jobs became;
  3. commit the plan in one transaction (``Store.record_turn``);
  4. only then carry it out: the runner starts and stops tasks (processes for ``hetsched
     up``, jobs on member clusters for a federation), and records what it started.

A crash before 3 loses only decisions, which the rebuilt core takes again; what the runner
started after 3 is found again by recovery. Tasks that could not start, and stops of tasks
that no longer run, are reported as exits in the next turn.

When the store cannot be written (disk full, read-only filesystem, database server down:
``controlplane/storage/health.py``), the turn whose record it refused is kept as it is,
planned and not carried out, and scheduling pauses: no job is held, given up or failed,
running tasks run on, and their exits wait in the executor. Every ``_PROBE_S`` the loop
tries that record again (or a probe write); the first that commits ends the outage, the
kept turn is carried out and turns go on, without a rebuild (the core and the store agree
again once the kept record is written).

What differs between ``hetsched up`` and a federation is the :class:`Runner`: the process
runner (``controlplane/processes.py``) or the federation's member runner. The loop owns the
core, the store's turn records, failed turns (``controlplane/faults.py``), the views the
API serves and the clock, which is injected (``clock``: seconds since the epoch).

When turns run: at once when something is posted (a submission, a cancel, a task's end, a
node change, a member's report); otherwise when the first of the core's ``next_wakeup()``,
the runner's next due time, the views' refresh and the dashboard's next history sample
comes. There is no fixed tick by default: a turn with nothing to report and no rule of the
core due does not call the core. Under load (events arrived during a turn) the loop pauses
as long as the turn took, which batches a burst into one turn and one commit.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hetsched.agent.checkpoints import Report
from hetsched.agent.guard import Guard
from hetsched.agent.watcher import NodeWatcher
from hetsched.controlplane.checkpointing import CheckpointProtocol
from hetsched.controlplane.faults import TurnFaults
from hetsched.controlplane.loopmetrics import LoopMetrics
from hetsched.controlplane.planner import TurnPlan, TurnPlanner
from hetsched.controlplane.runner import Runner
from hetsched.controlplane.schemas import SubmitSpec, from_stored
from hetsched.controlplane.storage.health import unavailable
from hetsched.controlplane.storage.store import Store
from hetsched.controlplane.views import quota_view
from hetsched.controlplane.workflows import tell_core
from hetsched.drivers import Exit
from hetsched.keys import TaskKey
from hetsched.model.device import Device
from hetsched.model.job import Job
from hetsched.model.lifecycle import TERMINAL
from hetsched.scheduler import Action, Event, JobCancelled, JobSubmitted, Scheduler
from hetsched.scheduler.view import SchedulerView

__all__ = ["ControlLoop"]

log = logging.getLogger(__name__)

#: the API's node and quota views lag the core by at most this after a change (seconds)
_REFRESH_S = 0.5
#: how often the store is tried again while it cannot be written (seconds)
_PROBE_S = 0.2


class ControlLoop:
    """Runs turns; the API talks to it only through :meth:`submitted`, :meth:`cancelled`
    and the views it refreshes, after committing; the runner through :meth:`post`."""

    def __init__(
        self,
        store: Store,
        scheduler: Scheduler,
        runner: Runner,
        make_core: Callable[[], Scheduler] | None = None,
        tick_s: float = math.inf,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.runner = runner
        self.planner = TurnPlanner(scheduler, runner.kill_grace_s)
        #: builds a fresh core with the nodes added, for rebuilding after a failed turn
        self.make_core = make_core
        #: a fixed tick on top of the core's wakeups (none by default; tests set it)
        self.tick_s = tick_s
        #: seconds since the epoch: every time the loop decides with
        self.clock = clock
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: events and exits for the next turn (recovery's, failed starts, empty stops)
        self._events: list[Event] = []
        self._exits: list[Exit] = []
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
        #: counters, histograms and the dashboard's history (controlplane/loopmetrics.py)
        self.metrics = LoopMetrics()
        #: failed turns: alerts, jobs held back, the wedge (controlplane/faults.py)
        self.faults = TurnFaults()
        self.metrics.watch_faults(self.faults)
        #: the jobs the turn in progress concerns (held back if it fails)
        self._concerns: set[str] = set()
        #: a turn planned whose record the store refused (it was unavailable): written
        #: and carried out first thing when the store takes writes again
        self._unwritten: tuple[list[Exit], TurnPlan] | None = None
        #: when the outage the last store alert was raised for began
        self._alerted: float | None = None
        runner.bind(self)

    @property
    def view(self) -> SchedulerView:
        """The core as the routes and metrics may read it (with :attr:`lock` held)."""
        return self.planner.core.view

    @property
    def guard(self) -> Guard | None:
        return self.runner.guard

    @property
    def watcher(self) -> NodeWatcher | None:
        return self.runner.watcher

    @property
    def checkpoints(self) -> CheckpointProtocol | None:
        return self.runner.checkpoints

    @property
    def devices(self) -> Mapping[str, Device]:
        return self.runner.devices

    # -- the API and the runner ------------------------------------------------------------

    def submitted(
        self, row: dict[str, Any], spec: SubmitSpec | None = None, job: Job | None = None
    ) -> None:
        """A job row the API has committed, with the spec it validated from the row's body
        and the job it built from it (then the loop need not validate nor build them
        again; a job whose id or submit time is not the row's is built again)."""
        self.post("submit", (row, spec, job))

    def cancelled(self, job_id: str, user: str) -> None:
        self.post("cancel", (job_id, f"cancelled by {user}"))

    def device_events(self, events: list[Event]) -> None:
        """Nodes joining and leaving, hot-plug and health changes, from a watcher (called
        from its thread)."""
        self.post("devices", events)

    def post(self, kind: str, payload: Any) -> None:
        """Something for the next turn (from any thread): the runner reads what is not a
        submission or a cancel (:meth:`Runner.message`)."""
        self._inbox.put((kind, payload))
        self._wake.set()

    def later(self, events: Iterable[Event] = (), exits: Iterable[Exit] = ()) -> None:
        """Events and exits for the next turn, from the loop's own thread."""
        events, exits = list(events), list(exits)
        self._events += events
        self._exits += exits
        if events or exits:
            self._wake.set()

    def wake(self) -> None:
        """Run a turn soon (any thread)."""
        self._wake.set()

    # -- lifecycle -------------------------------------------------------------------------

    def recover(self, now: float | None = None) -> None:
        """Rebuild the core from the store (the runner's recovery); its findings are the
        next turn's input."""
        now = self.clock() if now is None else now
        events, exits = self.runner.recover(self.store, self.planner, now)
        waiting = {e.job.id for e in events if isinstance(e, JobSubmitted)}
        self.faults.keep_only(waiting)
        self._events = [e for e in events if not self._hold(e)]
        self._exits = list(exits)

    def _hold(self, event: Event) -> bool:
        """Whether ``event`` concerns a job held back after a failed turn (it is not given
        to the core); a held job whose cancel was asked for is cancelled here."""
        if isinstance(event, JobSubmitted):
            return self.faults.is_held(event.job.id)
        if isinstance(event, JobCancelled) and self.faults.release(event.job_id) is not None:
            self.store.end_waiting_job(event.job_id, "cancelled", event.reason, self.clock())
            self.runner.ended(event.job_id)
            return True
        return False

    def start(self) -> None:
        self.runner.start()
        self._thread = threading.Thread(target=self._run, name="hetsched-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.store.health.outage is not None:
            self.runner.keep_exits(self._unrecorded())
        self.runner.stop()

    def _unrecorded(self) -> list[Exit]:
        """The exits the store has not taken: the kept turn's, and the next turn's."""
        kept = self._unwritten[0] if self._unwritten is not None else []
        return [*kept, *self._exits]

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.perf_counter()
            if self.faults.wedged is not None:
                self._rebuild([])
            else:
                try:
                    if self.store.health.outage is not None and self._unwritten is None:
                        self.store.probe()  # (with one kept, writing it is the probe)
                    self.turn()
                    self._release_held()
                except Exception as exc:
                    self._failed(exc)
                else:
                    self._store_back()
                    self.metrics.turn_done(self.clock())
                    self.faults.succeeded()
            if self.store.health.outage is not None:
                if self._stop.wait(_PROBE_S):
                    return
                continue
            if self._stop.wait(self.faults.delay()):
                return
            self._sleep(time.perf_counter() - began)

    def _store_back(self) -> None:
        """A turn wrote to the store: the end of an outage, if there was one."""
        ended = self.store.health.up()
        if ended is not None:
            alert = self.faults.store_back(ended.reason, ended.since, self.clock())
            log.warning("%s", alert.message)

    def _sleep(self, turn_s: float) -> None:
        """Until something happens or is due (see the module docstring)."""
        if self._wake.is_set():
            # events came during the turn: the loop is busy. A pause as long as the turn
            # batches the next burst into one turn (one cycle, one commit) and leaves the
            # API at least half of the interpreter
            time.sleep(min(0.2, turn_s))
        else:
            self._wake.wait(self._until_due(self.clock()))
        self._wake.clear()

    def _until_due(self, now: float) -> float:
        """Seconds until the loop has something to do without being woken."""
        due = [now + self.metrics.history.interval_s, self.metrics.history.next_due()]
        due += [self.planner.core.next_wakeup(), self.runner.next_due(now)]
        if self._dirty:
            due.append(self._nodes_at + _REFRESH_S)
        if self.tick_s != math.inf:
            due.append(self._last_tick + self.tick_s)
        return max(0.0, min(t for t in due if t is not None) - now)

    def _failed(self, exc: Exception) -> None:
        """A turn raised: alert, hold the jobs it concerned, rebuild from the store; or,
        when the store could not be written, pause (nothing held, nothing rebuilt)."""
        now = self.clock()
        reason = unavailable(exc)
        if reason is not None:
            self._store_down(reason, exc, now)
            return
        self.metrics.turn_failed()
        error = f"{type(exc).__name__}: {exc}"[:500]
        alert, give_up = self.faults.failed(error, self._concerns, now)
        if self.faults.consecutive == 1:
            log.error("%s; rebuilding the core from the store", alert.message, exc_info=exc)
        else:
            log.error("%s (%d in a row)", alert.message, self.faults.consecutive)
        self._rebuild(give_up)

    def _store_down(self, reason: str, exc: Exception, now: float) -> None:
        """The store cannot be written: the alert (once per outage, whoever met it first:
        a route, or this loop), and the exits it has not taken journaled."""
        said = self.store.health.down(reason)
        outage = self.store.health.outage
        if outage is not None and outage.since != self._alerted:
            self._alerted = outage.since
            self.runner.keep_exits(self._unrecorded())
            alert = self.faults.store_down(said, now)
            log.error("%s (%s: %s)", alert.message, type(exc).__name__, str(exc)[:300])

    def _rebuild(self, give_up: list[str]) -> None:
        """A fresh core from the store, as a restart builds it (the store is the truth: a
        decision the failed turn took was not committed). Jobs in ``give_up`` fail first.
        If the store and the new core cannot be made to agree, the loop is wedged: it
        schedules nothing until a later rebuild succeeds."""
        now = self.clock()
        if self.make_core is None:
            return
        try:
            self.runner.reset()
            # API submissions already queued are in the store: recovery replays them; the
            # runner keeps what it must of the rest. Drained before the core is made, so
            # a change that comes in between reaches it as an event.
            while True:
                try:
                    self.runner.drained(*self._inbox.get_nowait())
                except queue.Empty:
                    break
            with self.lock:
                self.planner = TurnPlanner(self.make_core(), self.runner.kill_grace_s)
            for job_id in give_up:
                alert = self.faults.gave_up(job_id, now)
                self.store.end_waiting_job(job_id, "failed", alert.message, now)
                log.error("%s", alert.message)
            self.recover(now)
        except Exception as exc:
            reason = unavailable(exc)
            if reason is not None:
                # the store, not the core, is the trouble: the rebuild is tried again every
                # _PROBE_S, and the banner says so once
                self._store_down(reason, exc, now)
                self.faults.consecutive = 0
                if self.faults.wedged is None:
                    self.faults.wedge(f"the store could not be read to rebuild: {reason}", now)
                return
            alert = self.faults.wedge(f"{type(exc).__name__}: {exc}"[:1000], now)
            log.error("%s; retrying in %.1fs", alert.message, self.faults.delay() or 0.1)
            self.faults.consecutive += 1
            return
        self._store_back()
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
        job = self.runner.submission(row, from_stored(row["spec"]), None).job
        queued = self.store.queue_times(job_id).get(job_id)
        self.later([JobSubmitted(job, int(row["run"]), int(row["restarts"]), queued)])

    # -- one turn --------------------------------------------------------------------------

    def turn(self, now: float | None = None) -> list[Action]:
        """One turn (see the module docstring); returns the core's actions."""
        now = self.clock() if now is None else now
        if self._unwritten is not None:
            self._write_unwritten()
        events, exits = self._collect(now)
        tell_core(self.store, self.planner.core, events)  # what jobs that wait need to know
        self._concerns = _jobs_named(events)
        try:
            before = self.runner.before(now)
        except Exception:
            # nothing was planned: what was collected goes to the next turn
            self._events[:0], self._exits[:0] = events, exits
            raise
        self._concerns |= _jobs_named(before.events)
        events += before.events
        exits += before.exits
        wakeup = self.planner.core.next_wakeup()
        core_due = wakeup is not None and wakeup <= now
        idle = not events and not exits and not before.reports and not core_due
        if idle and now - self._last_tick < self.tick_s:
            self._refresh(now)
            return []
        self._last_tick = now
        self._dirty = True
        plan = self._plan(events, exits, before.reports, now)
        starting = {start.key.job for start in plan.starts}
        self._concerns = starting or self._concerns | {t.job_id for t in plan.transitions}
        try:
            self.store.record_turn(exits, plan, starts_die_with_host=self.runner.tasks_here)
        except Exception as exc:
            if unavailable(exc) is not None:
                self._unwritten = (exits, plan)
            raise
        self._carry_out(plan)
        return plan.actions

    def _write_unwritten(self) -> None:
        """Write the turn the store refused, then carry it out. A refusal that is not the
        store's unavailability (the first try committed after all, and the connection
        dropped before it said so) is a failed turn: the rebuild takes the store's word."""
        assert self._unwritten is not None
        exits, plan = self._unwritten
        try:
            self.store.record_turn(exits, plan, starts_die_with_host=self.runner.tasks_here)
        except Exception as exc:
            if unavailable(exc) is None:
                self._unwritten = None
            raise
        self._unwritten = None
        self._store_back()
        self._carry_out(plan)

    def _carry_out(self, plan: TurnPlan) -> None:
        """A committed plan: forget the jobs it ended, start and stop its tasks."""
        for change in plan.transitions:
            if change.target in TERMINAL:
                self.runner.ended(change.job_id)
        # reported in the next turn: tasks that could not start, stops with no process
        self.later(exits=self.runner.carry_out(plan, plan.now))
        self.turns += 1
        self._refresh(plan.now)

    def _collect(self, now: float) -> tuple[list[Event], list[Exit]]:
        events, self._events = self._events, []
        exits, self._exits = self._exits, []
        while True:
            try:
                kind, payload = self._inbox.get_nowait()
            except queue.Empty:
                return events, exits
            if kind == "submit":
                events.append(self.runner.submission(*payload))
            elif kind == "cancel":
                cancel = JobCancelled(*payload)
                if not self._hold(cancel):
                    events.append(cancel)
            else:
                more, ended = self.runner.message(kind, payload, now)
                events += more
                exits += ended

    def _plan(
        self,
        events: list[Event],
        exits: list[Exit],
        reports: list[tuple[TaskKey, Report]],
        now: float,
    ) -> TurnPlan:
        with self.lock:
            began = time.perf_counter()
            plan = self.planner.plan(events, exits, now, reports)
            self.runner.annotate(plan, now)
            pending = sum(self.view.counts()[0].values())
            queue_of = self.runner.queue_of
            self.metrics.observe_turn(plan.actions, time.perf_counter() - began, queue_of, pending)
            self.metrics.observe_checkpoints(plan, queue_of)
        return plan

    # -- views -----------------------------------------------------------------------------

    def _refresh(self, now: float) -> None:
        """The views the API serves (at most every ``_REFRESH_S`` after a change, or every
        ``_REFRESH_S`` where the runner's nodes change between turns) and the dashboard's
        history sample (when one is due)."""
        stale = self._dirty or self.runner.live_views
        views_due = stale and now - self._nodes_at >= _REFRESH_S
        if not views_due and not self.metrics.history.due(now):
            return
        with self.lock:
            view = self.view
            if views_due:
                nodes = self.runner.node_view(view.cluster)
                self.quota_view = quota_view(view)
            self.metrics.sample(view, now)
        if views_due:
            self._nodes_at = now
            self._dirty = False
            self.nodes_view = self.runner.decorate(nodes, now)


def _jobs_named(events: Sequence[Event]) -> set[str]:
    """The jobs a turn's events submit or cancel."""
    submitted = {e.job.id for e in events if isinstance(e, JobSubmitted)}
    return submitted | {e.job_id for e in events if isinstance(e, JobCancelled)}
