"""The federation's reconcile loop: the one thread that runs its core.

It is the service's loop with members where the service has processes. Each turn:

1. collect: submissions and cancellations from the API (committed already); from the
   member workers, lease reports (with the states of the jobs sent there), jobs accepted
   or refused; and the time;
2. move members between states (``federation/members.py``): their core node joins,
   is marked unreachable or lapsed (no new jobs), or is removed once its jobs have surely
   stopped (the core then requeues them);
3. plan: the service's turn planner runs the core and the shared interpreter
   (``controlplane/planner.py``); a task of the federation's core is a job run on one member;
4. commit the plan (``Store.record_turn``: the same rows as ``hetsched up``'s);
5. only then carry it out: the member's worker sends the job (an idempotency key per run,
   so a retry never starts a second copy) or asks it to stop.

A job ends for the core when its member reports it ended with nothing of it still running.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hetsched.agent.executor import TaskExit
from hetsched.controlplane import (
    LoopMetrics,
    Store,
    SubmitSpec,
    TurnFaults,
    TurnPlan,
    TurnPlanner,
    from_stored,
    node_view,
    quota_view,
)
from hetsched.drivers import Start, Stop
from hetsched.federation.advice import explained, questions
from hetsched.federation.dispatch import Dispatch
from hetsched.federation.jobs import as_one_task, member_body
from hetsched.federation.member import Report, nodes_to_view
from hetsched.federation.members import (
    FENCED,
    LAPSED,
    UNREACHABLE,
    MemberState,
    labels_of,
    member_node,
    member_view,
)
from hetsched.federation.plugins import READY, Book
from hetsched.federation.recovery import Found, recover
from hetsched.federation.store import Inventory, write_inventory
from hetsched.federation.worker import (
    Answered,
    Ask,
    Cancel,
    Gone,
    Heard,
    Message,
    Send,
    Silent,
    Submitted,
    WorkerRefused,
)
from hetsched.framework.runtime import Framework
from hetsched.keys import TaskKey
from hetsched.model.device import Device
from hetsched.model.job import Job
from hetsched.model.lifecycle import TERMINAL, JobState
from hetsched.scheduler import (
    Action,
    Event,
    JobCancelled,
    JobSubmitted,
    NodeAdded,
    NodeChanged,
    NodeRemoved,
    Pending,
    Scheduler,
)
from hetsched.scheduler.view import SchedulerView

__all__ = ["FederationLoop"]

log = logging.getLogger(__name__)


class FederationLoop:
    """Runs turns of the federation (see the module docstring). The API talks to it through
    :meth:`submitted`, :meth:`cancelled` and the views it refreshes."""

    def __init__(
        self,
        federation: str,
        store: Store,
        core: Scheduler,
        members: Mapping[str, MemberState],
        book: Book,
        framework: Framework,
        home: Path,
        margin_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.federation = federation
        self.store = store
        self.planner = TurnPlanner(core, 0.0)
        self.members = dict(members)
        self.book = book
        #: the profile's plugins, for per-member explanations (what-if only)
        self.framework = framework
        self.home = home
        self.margin_s = margin_s
        self.clock = clock
        self.tick_s = 0.5
        self.lock = threading.Lock()
        self.metrics = LoopMetrics()
        #: failed turns and their alerts (``GET /v1/alerts``); a federation holds no job back
        self.faults = TurnFaults()
        self.metrics.watch_faults(self.faults)
        #: builds a fresh core (no nodes) for rebuilding after a failed turn
        self.make_core: Callable[[], Scheduler] | None = None
        self.nodes_view: list[dict[str, Any]] = []
        self.quota_view: dict[str, dict[str, dict[str, float]]] = {}
        self.members_view: list[dict[str, Any]] = []
        self.devices: dict[str, Device] = {}
        self.dispatches: dict[TaskKey, Dispatch] = {}
        self._by_member_job: dict[tuple[str, str], TaskKey] = {}
        #: job id -> the submission as accepted (what members receive)
        self.submissions: dict[str, dict[str, Any]] = {}
        #: job id -> its resubmission after a restart, held until the job's dispatches being
        #: stopped have ended (so it never runs twice at once)
        self._parked: dict[str, JobSubmitted] = {}
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._events: list[Event] = []
        self._exits: list[TaskExit] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_tick = 0.0
        self._views_at = 0.0
        #: how often the members' own what-if is asked for the jobs that wait
        self.whatif_every_s = 2.0
        self._asked_at = 0.0
        #: members answered something new: waiting jobs' explanations are written again
        self._reexplain = False
        self.turns = 0

    @property
    def view(self) -> SchedulerView:
        return self.planner.core.view

    @property
    def guard(self) -> None:
        """A federation runs no task itself: no overcommit guard."""
        return None

    @property
    def watcher(self) -> None:
        """... and watches no device."""
        return None

    @property
    def checkpoints(self) -> None:
        """... and takes no checkpoint reports (its members' services do)."""
        return None

    # -- the API and the workers -----------------------------------------------------------

    def submitted(
        self, row: dict[str, Any], spec: SubmitSpec | None = None, job: Job | None = None
    ) -> None:
        """A job the API committed (``job``, the API's build of it, is not needed here)."""
        self._inbox.put(("submit", (row, spec)))
        self._wake.set()

    def cancelled(self, job_id: str, user: str) -> None:
        self._inbox.put(("cancel", (job_id, user)))
        self._wake.set()

    def told(self, message: Message) -> None:
        """A member worker's message (called from its thread)."""
        self._inbox.put(("member", message))
        self._wake.set()

    # -- lifecycle -------------------------------------------------------------------------

    def take(self, found: Found) -> None:
        """What recovery found: the first turn's events, tasks the core holds again, the
        dispatches it took back (each sent again where the member's job id is unknown,
        stopped again where it was being stopped), exits to report, and resubmissions held
        until the job's dispatches being stopped have ended."""
        self._events = list(found.events)
        self._exits = list(found.exits)
        self.submissions.update(found.submissions)
        self._parked.update(found.parked)
        for key, placement in found.adopted:
            self.planner.adopt(key, placement)
        for dispatch in found.dispatches:
            self._track(dispatch)
            state = self.members[dispatch.member]
            if dispatch.job_id is None:
                self._send(state, dispatch)
            elif dispatch.stopping:
                state.worker.submit(Cancel(dispatch.job_id, dispatch.incarnation))
        self._watch()

    def start(self) -> None:
        for state in self.members.values():
            state.worker.start()
        self._thread = threading.Thread(target=self._run, name="federation-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for state in self.members.values():
            state.worker.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.turn()
            except Exception as exc:
                # the core may now disagree with the store, which is the truth: rebuild it
                self.metrics.turn_failed()
                log.exception("federation turn failed; rebuilding the core from the store")
                self.faults.failed(f"{type(exc).__name__}: {exc}", set(), self.clock())
                self._rebuild()
            else:
                self.metrics.turn_done(self.clock())
                self.faults.succeeded()
            if self._stop.wait(self.faults.delay()):
                return
            self._wake.wait(timeout=0.1)
            self._wake.clear()

    def _rebuild(self) -> None:
        """A fresh core from the store, as a restart builds it, with the members as they
        are now; what the workers still carry out is matched again by its keys."""
        if self.make_core is None:
            return
        try:
            now = self.clock()
            core = self.make_core()
            nodes = [NodeAdded(member_node(s)) for s in self.members.values() if s.in_core]
            core.handle(nodes, now)
            while True:
                try:
                    self._inbox.get_nowait()  # the store has the API's; members report again
                except queue.Empty:
                    break
            with self.lock:
                self.planner = TurnPlanner(core, 0.0)
            self.dispatches.clear()
            self._by_member_job.clear()
            self._parked.clear()
            self.take(recover(self.store, core, self.members, self.book, now))
            self.faults.rebuilt(now)
        except Exception as exc:
            log.exception("rebuilding the federation's core failed; retrying")
            self.faults.wedge(f"{type(exc).__name__}: {exc}", self.clock())

    # -- one turn --------------------------------------------------------------------------

    def turn(self, now: float | None = None) -> list[Action]:
        now = self.clock() if now is None else now
        events, exits = self._collect(now)
        events += self._deadlines(now)
        self._ask(now)
        if not events and not exits and now - self._last_tick < self.tick_s:
            self._refresh(now)
            return []
        self._last_tick = now
        plan = self._plan(events, exits, now)
        self.store.record_turn(exits, plan)
        self._carry_out(plan, now)
        self.turns += 1
        self._refresh(now)
        return plan.actions

    def _collect(self, now: float) -> tuple[list[Event], list[TaskExit]]:
        events, self._events = self._events, []
        exits, self._exits = self._exits, []
        while True:
            try:
                kind, payload = self._inbox.get_nowait()
            except queue.Empty:
                return events, exits
            if kind == "submit":
                events.append(self._submit_event(*payload))
            elif kind == "cancel":
                job_id, user = payload
                events.append(JobCancelled(job_id, f"cancelled by {user}"))
            else:
                self._message(payload, now, events, exits)

    def _submit_event(self, row: dict[str, Any], spec: SubmitSpec | None) -> Event:
        spec = spec if spec is not None else from_stored(row["spec"])
        job = spec.to_job(row["id"], row["owner"], float(row["submitted_at"]))
        self.book.jobs[job.id] = job
        self.submissions[job.id] = dict(row["spec"])
        return JobSubmitted(as_one_task(job))

    def _plan(self, events: list[Event], exits: list[TaskExit], now: float) -> TurnPlan:
        with self.lock:
            began = time.perf_counter()
            plan = self.planner.plan(events, exits, now)
            if self._reexplain:
                self._reexplain = False
                for job in self.view.jobs()[:500]:
                    waiting = job.state is JobState.PENDING and job.explanation is not None
                    if waiting and job.explanation is not None and job.id not in plan.explanations:
                        plan.explanations[job.id] = Pending(job.id, job.explanation)
            self._explain(plan, now)
            pending, _ = self.view.counts()
            self.metrics.observe_turn(
                plan.actions, time.perf_counter() - began, self._queue_of, sum(pending.values())
            )
        for change in plan.transitions:
            if change.target in TERMINAL:
                self.book.jobs.pop(change.job_id, None)
                self.submissions.pop(change.job_id, None)
        return plan

    def _queue_of(self, job_id: str) -> str:
        job = self.book.jobs.get(job_id)
        return job.queue if job is not None else ""

    def _explain(self, plan: TurnPlan, now: float) -> None:
        """Waiting jobs' explanations name each member (``federation/advice.py``)."""
        for job_id, pending in list(plan.explanations.items()):
            view = self.view.job(job_id) if pending is not None else None
            if pending is None or view is None:
                continue
            explanation = explained(
                self.framework, self.view.cluster, view.job, pending.explanation, self.book, now
            )
            plan.explanations[job_id] = Pending(job_id, explanation)

    def _ask(self, now: float) -> None:
        """Now and then, ask each ready member's own what-if for the jobs that wait."""
        if now - self._asked_at < self.whatif_every_s:
            return
        self._asked_at = now
        with self.lock:
            waiting = [j.id for j in self.view.jobs() if j.state is JobState.PENDING]
        bodies = questions(self.book, self.submissions, waiting)
        for state in self.members.values():
            if bodies and state.status == READY:
                asked = {k: member_body(v, "", state.queue) for k, v in bodies.items()}
                for body in asked.values():
                    body.pop("federation", None)  # a question, not a job: no lease needed
                state.worker.submit(Ask(asked, state.incarnation))

    # -- members ---------------------------------------------------------------------------

    def _message(
        self, message: Message, now: float, events: list[Event], exits: list[TaskExit]
    ) -> None:
        state = self.members[message.member]
        match message:
            case Heard(_, report, bounds):
                state.bounds, state.heard = bounds, now
                self._heard(state, report, now, events, exits)
            case Silent(_, bounds, why):
                state.bounds = bounds
                if state.status == READY:
                    state.why = f"no answer: {why}"
            case Submitted(_, key, incarnation, job_id):
                self._accepted(state, key, incarnation, job_id, now)
            case WorkerRefused(_, key, incarnation, reason):
                dispatch = self.dispatches.get(key)
                if dispatch is not None and dispatch.incarnation == incarnation:
                    self._end(dispatch)
                    why = f"member {state.name} refused it: {reason}"
                    exits.append(TaskExit(key.job, key.task, key.run, None, False, why))
            case Answered(_, answers):
                if self.book.whatif.get(state.name) != answers:
                    self.book.whatif[state.name] = dict(answers)
                    self._reexplain = True
            case Gone(_, job_id):
                gone = self._by_member_job.get((state.name, job_id))
                if gone is not None:
                    dispatch = self.dispatches[gone]
                    self._end(dispatch)
                    exits.append(self._exit(dispatch, None, "the member does not know it"))

    def _heard(
        self,
        state: MemberState,
        report: Report,
        now: float,
        events: list[Event],
        exits: list[TaskExit],
    ) -> None:
        lapsed = (
            report.lapsed
            or (state.lapses is not None and report.lapses > state.lapses)
            or any(j.fenced for j in report.jobs.values())
        )
        if state.in_core and lapsed and state.status != LAPSED:
            self._set(state, LAPSED, "its lease lapsed there; its jobs are being stopped", events)
        self._reported_jobs(state, report, exits)
        # fenced at once only when the report covered every job sent there (a success
        # among them counts, and has just been taken)
        covered = all(
            d.job_id in report.jobs
            for d in self.dispatches.values()
            if d.member == state.name and d.job_id is not None
        )
        if state.status == LAPSED and report.live_jobs == 0 and covered:
            events += self._fence(state, "its lease lapsed there and its jobs have stopped")
        state.lapses = report.lapses
        state.live_jobs = report.live_jobs
        if report.nodes and (
            state.inventory is None or nodes_to_view(report.nodes) != nodes_to_view(state.inventory)
        ):
            state.inventory = report.nodes
        if not (report.live and state.bounds.surely_live(now)):
            return
        if state.in_core and state.status == UNREACHABLE:
            self._set(state, READY, "renewed", events)
        elif not state.in_core and state.inventory:
            events += self._join(state)
        if state.in_core:
            self._save(state)

    def _reported_jobs(self, state: MemberState, report: Report, exits: list[TaskExit]) -> None:
        """Jobs the member reports ended become exits. While its lease has lapsed there,
        only successes count: the rest were stopped by the lapse, and the fence requeues
        them."""
        for job in report.jobs.values():
            key = self._by_member_job.get((state.name, job.id))
            if key is None or not job.ended:
                continue
            dispatch = self.dispatches[key]
            if state.status == LAPSED and job.state != "succeeded":
                continue
            self._end(dispatch)
            if job.state == "succeeded":
                exits.append(self._exit(dispatch, 0, f"succeeded on member {state.name}"))
            else:
                code = job.exit_code if job.state == "failed" else None
                text = f"{job.state} on member {state.name}" + (
                    f": {job.reason}" if job.reason else ""
                )
                exits.append(self._exit(dispatch, code if code is not None else None, text))

    def _exit(self, dispatch: Dispatch, code: int | None, reason: str) -> TaskExit:
        key = dispatch.key
        return TaskExit(key.job, key.task, key.run, code, dispatch.stopping, reason)

    def _deadlines(self, now: float) -> list[Event]:
        """Members not confirmed live in time are marked unreachable; those whose tasks have
        surely stopped are fenced."""
        events: list[Event] = []
        for state in self.members.values():
            if not state.in_core:
                continue
            bounds = state.bounds
            if state.status == READY and not bounds.surely_live(now):
                self._set(state, UNREACHABLE, state.why or "no renewal confirmed in time", events)
            if state.status in (UNREACHABLE, LAPSED) and now >= bounds.stopped_by:
                why = f"not confirmed live since its lease ran out (+{bounds.fence_after_s:g}s)"
                events += self._fence(state, why)
        return events

    def _set(self, state: MemberState, status: str, why: str, events: list[Event]) -> None:
        state.status, state.why = status, why
        events.append(NodeChanged(state.name, labels=labels_of(state)))
        log.info("member %s: %s (%s)", state.name, status, why)

    def _join(self, state: MemberState) -> list[Event]:
        state.incarnation += 1
        state.status, state.why, state.in_core = READY, "joined", True
        state.worker.incarnation = state.incarnation
        node = member_node(state)
        assert state.inventory is not None
        self.book.inventories[state.name] = state.inventory
        self.devices.update({d.id: d for d in node.devices})
        self._save(state)
        log.info("member %s: joined (incarnation %d)", state.name, state.incarnation)
        return [NodeAdded(node)]

    def _fence(self, state: MemberState, why: str) -> list[Event]:
        """The member's tasks have surely stopped: its node leaves the core, which requeues
        its jobs; operations still queued for it are dropped."""
        state.status, state.why, state.in_core = FENCED, why, False
        state.worker.incarnation = state.incarnation + 1
        self.book.inventories.pop(state.name, None)
        for dispatch in [d for d in self.dispatches.values() if d.member == state.name]:
            self._end(dispatch)
        log.warning("member %s: fenced: %s", state.name, why)
        return [NodeRemoved(state.name, f"member {state.name} fenced: {why}")]

    def _save(self, state: MemberState) -> None:
        if state.inventory is None:
            return
        inventory = Inventory(
            state.incarnation,
            nodes_to_view(state.inventory),
            state.lapses or 0,
            state.bounds.fence_after_s,
        )
        write_inventory(self.home, state.name, inventory)

    # -- dispatches ------------------------------------------------------------------------

    def _track(self, dispatch: Dispatch) -> None:
        self.dispatches[dispatch.key] = dispatch
        if dispatch.job_id is not None:
            self._by_member_job[(dispatch.member, dispatch.job_id)] = dispatch.key

    def _end(self, dispatch: Dispatch) -> None:
        self.dispatches.pop(dispatch.key, None)
        if dispatch.job_id is not None:
            self._by_member_job.pop((dispatch.member, dispatch.job_id), None)
        job_id = dispatch.key.job
        if job_id in self._parked and not any(k.job == job_id for k in self.dispatches):
            self._events.append(self._parked.pop(job_id))
            self._wake.set()

    def _accepted(
        self, state: MemberState, key: TaskKey, incarnation: int, job_id: str, now: float
    ) -> None:
        dispatch = self.dispatches.get(key)
        if dispatch is None or dispatch.incarnation != incarnation:
            # fenced meanwhile: the member stops it with the lapsed lease; ask it anyway
            state.worker.submit(Cancel(job_id, state.worker.incarnation))
            return
        dispatch.job_id = job_id
        self._track(dispatch)
        self.store.record_remote_start(key, job_id, now)
        if dispatch.stopping:
            state.worker.submit(Cancel(job_id, incarnation))

    def _send(self, state: MemberState, dispatch: Dispatch) -> None:
        submission = self.submissions.get(dispatch.key.job)
        if submission is None:
            key = dispatch.key
            self._exits.append(TaskExit(key.job, key.task, key.run, None, False, "no spec"))
            return
        body = member_body(submission, self.federation, state.queue)
        idempotency = f"{self.federation}:{dispatch.key}"
        state.worker.submit(Send(dispatch.key, dispatch.incarnation, idempotency, body))

    def _carry_out(self, plan: TurnPlan, now: float) -> None:
        for start in plan.starts:
            self._start(start)
        for stop in plan.stops:
            self._stopping(stop)
        if self._exits:
            self._wake.set()

    def _start(self, start: Start) -> None:
        state = self.members[start.placement.node]
        dispatch = Dispatch(start.key, state.name, state.incarnation)
        self._track(dispatch)
        self._send(state, dispatch)

    def _stopping(self, stop: Stop) -> None:
        dispatch = self.dispatches.get(stop.key)
        key = stop.key
        if stop.released or dispatch is None:
            # its member was fenced (or it ended): nothing runs; the core freed it already
            why = stop.reason or "stopped"
            self._exits.append(TaskExit(key.job, key.task, key.run, None, True, why))
            return
        dispatch.stopping = True
        if dispatch.job_id is not None:
            worker = self.members[dispatch.member].worker
            worker.submit(Cancel(dispatch.job_id, dispatch.incarnation))

    # -- views -----------------------------------------------------------------------------

    def _watch(self) -> None:
        """Tell each worker which of its member's jobs to ask about."""
        for state in self.members.values():
            state.worker.watch = frozenset(
                d.job_id
                for d in self.dispatches.values()
                if d.member == state.name and d.job_id is not None
            )

    def _refresh(self, now: float) -> None:
        self._watch()
        if now - self._views_at < 0.5:
            return
        self._views_at = now
        with self.lock:
            view = self.view
            nodes = [n for n in node_view(view.cluster, {}) if n["active"]]
            self.quota_view = quota_view(view)
            self.metrics.sample(view, now)
        members = [member_view(s, now) for s in self.members.values()]
        by_name = {m["name"]: m for m in members}
        for node in nodes:
            node["member"] = by_name.get(node["name"])
        # members out of the core (fenced, not joined yet) are listed too, inactive, with
        # the same labels as a member node in the core (its state among them)
        listed = {n["name"] for n in nodes}
        nodes += [
            {
                "name": s.name,
                "active": False,
                "cpu_milli": 0,
                "cpu_free_milli": 0,
                "memory_mib": 0,
                "memory_free_mib": 0,
                "labels": dict(labels_of(s)),
                "devices": [],
                "member": by_name[s.name],
            }
            for s in self.members.values()
            if s.name not in listed
        ]
        self.nodes_view = nodes
        self.members_view = members
