"""The member runner: a federation is the control plane with member clusters as its nodes
and jobs on them as its tasks.

The turn loop is the control plane's (``controlplane/loop.py``); this is its
:class:`~hetsched.controlplane.Runner`. Around each turn:

1. collect, from the member workers (``federation/worker.py``): lease reports (with the
   states of the jobs sent there), jobs accepted or refused, what-if answers;
2. move members between states (``federation/members.py``): their core node joins, is
   marked unreachable or lapsed (no new jobs), or is removed once its jobs have surely
   stopped (the core then requeues them);
3. after the loop has committed the plan, carry it out: the member's worker sends the job
   (an idempotency key per run, so a retry never starts a second copy) or asks it to stop.

A job ends for the core when its member reports it ended with nothing of it still running.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hetsched.cluster.state import ClusterState
from hetsched.controlplane import (
    Before,
    LoopHandle,
    Store,
    SubmitSpec,
    TurnPlan,
    TurnPlanner,
    from_stored,
)
from hetsched.controlplane import node_view as core_node_view
from hetsched.drivers import Exit, Stop
from hetsched.federation.advice import explained, questions
from hetsched.federation.dispatch import Dispatch
from hetsched.federation.jobs import as_one_task, member_body, submission_of
from hetsched.federation.member import Report, nodes_to_view
from hetsched.federation.members import (
    FENCED,
    LAPSED,
    UNREACHABLE,
    MemberState,
    labels_of,
    member_node,
    members_nodes,
)
from hetsched.federation.plugins import READY, Book
from hetsched.federation.recovery import recover
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
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import (
    Event,
    JobSubmitted,
    NodeAdded,
    NodeChanged,
    NodeRemoved,
    Pending,
)

__all__ = ["MemberRunner"]

log = logging.getLogger(__name__)

#: how often member deadlines are checked between posts (seconds)
_POLL_S = 0.1


class MemberRunner:
    """The control plane's runner for a federation (see the module docstring)."""

    kill_grace_s = 0.0
    tasks_here = False
    live_views = True
    #: a federation runs no task itself: no overcommit guard, no device watcher, no
    #: checkpoint reports (its members' services take those)
    guard = None
    watcher = None
    checkpoints = None

    def __init__(
        self,
        federation: str,
        members: Mapping[str, MemberState],
        book: Book,
        framework: Framework,
        home: Path,
    ) -> None:
        self.federation = federation
        self.members = dict(members)
        self.book = book
        #: the profile's plugins, for per-member explanations (what-if only)
        self.framework = framework
        self.home = home
        self.members_view: list[dict[str, Any]] = []
        self.devices: dict[str, Device] = {}
        self.dispatches: dict[TaskKey, Dispatch] = {}
        self._by_member_job: dict[tuple[str, str], TaskKey] = {}
        #: job id -> the submission as accepted (what members receive)
        self.submissions: dict[str, dict[str, Any]] = {}
        #: job id -> its resubmission after a restart, held until the job's dispatches being
        #: stopped have ended (so it never runs twice at once)
        self._parked: dict[str, JobSubmitted] = {}
        #: how often the members' own what-if is asked for the jobs that wait
        self.whatif_every_s = 2.0
        self._asked_at = 0.0
        #: members answered something new: waiting jobs' explanations are written again
        self._reexplain = False
        self._loop: LoopHandle | None = None

    @property
    def loop(self) -> LoopHandle:
        assert self._loop is not None, "bind() first"
        return self._loop

    def bind(self, loop: LoopHandle) -> None:
        self._loop = loop

    def told(self, message: Message) -> None:
        """A member worker's message (called from its thread)."""
        self.loop.post("member", message)

    def start(self) -> None:
        for state in self.members.values():
            state.worker.start()

    def stop(self) -> None:
        for state in self.members.values():
            state.worker.stop()

    def submission(
        self, row: dict[str, Any], spec: SubmitSpec | None, job: Job | None
    ) -> JobSubmitted:
        """A job the API committed (``job``, the API's build of it, is not needed here)."""
        spec = spec if spec is not None else from_stored(row["spec"])
        whole = spec.to_job(row["id"], row["owner"], float(row["submitted_at"]))
        self.book.jobs[whole.id] = whole
        self.submissions[whole.id] = dict(row["spec"])
        return JobSubmitted(as_one_task(whole))

    def message(self, kind: str, payload: Any, now: float) -> tuple[list[Event], list[Exit]]:
        events: list[Event] = []
        exits: list[Exit] = []
        if kind == "member":
            self._message(payload, now, events, exits)
        return events, exits

    def before(self, now: float) -> Before:
        self._watch()
        events = self._deadlines(now)
        self._ask(now)
        return Before(events)

    def recover(
        self, store: Store, planner: TurnPlanner, now: float
    ) -> tuple[list[Event], list[Exit]]:
        """What recovery found: the first turn's events, tasks the core holds again, the
        dispatches it took back (each sent again where the member's job id is unknown,
        stopped again where it was being stopped), exits to report, and resubmissions held
        until the job's dispatches being stopped have ended."""
        found = recover(store, planner.core, self.members, self.book, now)
        self.submissions.update(found.submissions)
        self._parked.update(found.parked)
        for key, placement in found.adopted:
            planner.adopt(key, placement)
        exits = list(found.exits)
        for dispatch in found.dispatches:
            self._track(dispatch)
            state = self.members[dispatch.member]
            if dispatch.job_id is None:
                exits += self._send(state, dispatch)
            elif dispatch.stopping:
                state.worker.submit(Cancel(dispatch.job_id, dispatch.incarnation))
        self._watch()
        return list(found.events), exits

    def reset(self) -> None:
        """What the workers still carry out is matched again by its keys."""
        self.dispatches.clear()
        self._by_member_job.clear()
        self._parked.clear()

    def keep_exits(self, exits: list[Exit]) -> None:
        pass  # a member keeps its jobs' ends: the next report brings them again

    def drained(self, kind: str, payload: Any) -> None:
        """Members report again: nothing posted needs keeping."""

    def next_due(self, now: float) -> float | None:
        return now + _POLL_S

    # -- one turn --------------------------------------------------------------------------

    def annotate(self, plan: TurnPlan, now: float) -> None:
        """Waiting jobs' explanations name each member; after members answered something
        new, those of every waiting job are written again."""
        view = self.loop.view
        if self._reexplain:
            self._reexplain = False
            for job in view.jobs()[:500]:
                waiting = job.state is JobState.PENDING and job.explanation is not None
                if waiting and job.explanation is not None and job.id not in plan.explanations:
                    plan.explanations[job.id] = Pending(job.id, job.explanation)
        self._explain(plan, now)

    def ended(self, job_id: str) -> None:
        self.book.jobs.pop(job_id, None)
        self.submissions.pop(job_id, None)

    def queue_of(self, job_id: str) -> str:
        job = self.book.jobs.get(job_id)
        return job.queue if job is not None else ""

    def _explain(self, plan: TurnPlan, now: float) -> None:
        """Waiting jobs' explanations name each member (``federation/advice.py``)."""
        core = self.loop.view
        for job_id, pending in list(plan.explanations.items()):
            view = core.job(job_id) if pending is not None else None
            if pending is None or view is None:
                continue
            explanation = explained(
                self.framework, core.cluster, view.job, pending.explanation, self.book, now
            )
            plan.explanations[job_id] = Pending(job_id, explanation)

    def _ask(self, now: float) -> None:
        """Now and then, ask each ready member's own what-if for the jobs that wait."""
        if now - self._asked_at < self.whatif_every_s:
            return
        self._asked_at = now
        with self.loop.lock:
            waiting = [j.id for j in self.loop.view.jobs() if j.state is JobState.PENDING]
        bodies = questions(self.book, self.submissions, waiting)
        for state in self.members.values():
            if bodies and state.status == READY:
                asked = {k: member_body(v, "", state.queue) for k, v in bodies.items()}
                for body in asked.values():
                    body.pop("federation", None)  # a question, not a job: no lease needed
                state.worker.submit(Ask(asked, state.incarnation))

    # -- members ---------------------------------------------------------------------------

    def _message(
        self, message: Message, now: float, events: list[Event], exits: list[Exit]
    ) -> None:
        state = self.members[message.member]
        match message:
            case Heard(_, report, bounds):
                state.bounds, state.heard = bounds, now
                self._heard(state, report, now, events, exits)
            case Silent(_, bounds, why):
                state.bounds = bounds
                if state.status == READY or state.heard is None:  # never heard: say why
                    state.why = f"no answer: {why}"
            case Submitted(_, key, incarnation, job_id):
                self._accepted(state, key, incarnation, job_id, now)
            case WorkerRefused(_, key, incarnation, reason):
                dispatch = self.dispatches.get(key)
                if dispatch is not None and dispatch.incarnation == incarnation:
                    self._end(dispatch)
                    why = f"member {state.name} refused it: {reason}"
                    exits.append(Exit.of(key.job, key.task, key.run, None, False, why))
            case Answered(_, answers):
                if self.book.whatif.get(state.name) != answers:
                    self.book.whatif[state.name] = dict(answers)
                    self._reexplain = True
            case Gone(_, job_id):
                gone = self._by_member_job.get((state.name, job_id))
                if gone is not None:
                    dispatch = self.dispatches[gone]
                    self._end(dispatch)
                    why = f"member {state.name} does not know it (its job {job_id} there)"
                    exits.append(self._exit(dispatch, None, why))

    def _heard(
        self,
        state: MemberState,
        report: Report,
        now: float,
        events: list[Event],
        exits: list[Exit],
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

    def _reported_jobs(self, state: MemberState, report: Report, exits: list[Exit]) -> None:
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

    def _exit(self, dispatch: Dispatch, code: int | None, reason: str) -> Exit:
        key = dispatch.key
        return Exit.of(key.job, key.task, key.run, code, dispatch.stopping, reason)

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
        # the story of each job it requeues names the member and the lease it lost there
        lease = f"incarnation {state.incarnation}" + (
            f", {state.lapses} lapse(s) there" if state.lapses else ""
        )
        return [NodeRemoved(state.name, f"member {state.name} fenced: {why} ({lease})")]

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
            self.loop.later([self._parked.pop(job_id)])

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
        self.loop.store.record_remote_start(key, job_id, now)
        if dispatch.stopping:
            state.worker.submit(Cancel(job_id, incarnation))

    def _send(self, state: MemberState, dispatch: Dispatch) -> list[Exit]:
        """Send the dispatch's job to its member; an exit if its submission is unknown."""
        submission = submission_of(self.submissions, dispatch.key.job)
        if submission is None:
            key = dispatch.key
            return [Exit.of(key.job, key.task, key.run, None, False, "no spec")]
        body = member_body(submission, self.federation, state.queue)
        idempotency = f"{self.federation}:{dispatch.key}"
        state.worker.submit(Send(dispatch.key, dispatch.incarnation, idempotency, body))
        return []

    def carry_out(self, plan: TurnPlan, now: float) -> list[Exit]:
        exits: list[Exit] = []
        for start in plan.starts:
            state = self.members[start.placement.node]
            dispatch = Dispatch(start.key, state.name, state.incarnation)
            self._track(dispatch)
            exits += self._send(state, dispatch)
        for stop in plan.stops:
            exits += self._stopping(stop)
        self._watch()
        return exits

    def _stopping(self, stop: Stop) -> list[Exit]:
        dispatch = self.dispatches.get(stop.key)
        key = stop.key
        if stop.released or dispatch is None:
            # its member was fenced (or it ended): nothing runs; the core freed it already
            why = stop.reason or "stopped"
            return [Exit.of(key.job, key.task, key.run, None, True, why)]
        dispatch.stopping = True
        if dispatch.job_id is not None:
            worker = self.members[dispatch.member].worker
            worker.submit(Cancel(dispatch.job_id, dispatch.incarnation))
        return []

    # -- views -----------------------------------------------------------------------------

    def _watch(self) -> None:
        """Tell each worker which of its member's jobs to ask about."""
        for state in self.members.values():
            state.worker.watch = frozenset(
                d.job_id
                for d in self.dispatches.values()
                if d.member == state.name and d.job_id is not None
            )

    def node_view(self, cluster: ClusterState) -> list[dict[str, Any]]:
        return [n for n in core_node_view(cluster, {}) if n["active"]]

    def decorate(self, nodes: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        nodes, self.members_view = members_nodes(nodes, self.members.values(), now)
        return nodes
