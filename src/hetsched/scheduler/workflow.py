"""Dependencies and arrays in the core: jobs held until what they wait for has ended, and
arrays whose elements are created as they may run.

A job with ``after`` is *held*: it is pending, with a record and a history, but outside the
queue, the tally, the quotas and the fair-share order, until every job it names has ended
as it needs. Then it enters the queue as a fresh submission would (its queue time starts
then). A dependency that can no longer be met cancels it with the reason ("etl-2 failed"),
unless it says ``on_unmet: keep``: then it stays held, and its explanation says so.

An array's record (the parent) never enters the queue either: its elements do, created by
:class:`~hetsched.scheduler.arrays.ArrayBook` a window at a time. The parent runs from its
first element's start and ends when its last element ends: succeeded if every element did,
failed otherwise, cancelled when it is cancelled (with its live elements). A dependency on
an array waits for all its elements.

The book reacts to the job book's state changes (:meth:`Workflows.moved`) and acts in
:meth:`Workflows.settle`, which the core calls after the events and after each cycle: a
change cascades there (a failure cancels a chain of dependents in one call).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from hetsched.framework.status import Code
from hetsched.model.lifecycle import TERMINAL, JobState, Transition
from hetsched.model.workflow import Dependency, OnUnmet, split_element
from hetsched.scheduler.actions import Change, JobTransition, Pending
from hetsched.scheduler.arrays import ArrayBook, element_job
from hetsched.scheduler.explain import Explanation
from hetsched.scheduler.records import JobRecord

if TYPE_CHECKING:
    from hetsched.scheduler.books import Books
    from hetsched.scheduler.core import Scheduler

__all__ = ["Workflows"]

#: the ends of an element that ran
_RAN = frozenset({JobState.SUCCEEDED, JobState.FAILED})


class Workflows:
    """Held jobs, the jobs they wait for, and live arrays (see the module docstring)."""

    def __init__(self) -> None:
        #: jobs waiting for dependencies, by id
        self.held: dict[str, JobRecord] = {}
        #: job id -> the held jobs that wait for it
        self.waiters: dict[str, list[str]] = {}
        #: live arrays by id
        self.arrays: dict[str, ArrayBook] = {}
        #: ends of jobs the core no longer (or never) had a record of: recovery's, those
        #: that held jobs wait for, and with ``remember`` every end (a driver that drops
        #: ended records and submits dependencies on them later: the simulator)
        self.outcomes: dict[str, JobState] = {}
        self.remember = False
        #: recovery's word on arrays' elements: array id -> (ended by index, live indexes)
        self._prior: dict[str, tuple[dict[int, JobState], set[int]]] = {}
        #: array id -> the elements held jobs wait for (``ID[7]``): one not created when
        #: its array ends never will be, and those waiters are told
        self._element_waits: dict[str, set[str]] = {}
        #: the names of jobs known only by their ends (``known_end``)
        self._names: dict[str, str] = {}
        #: jobs whose change their waiters must look at, arrays to look at
        self._changed: dict[str, None] = {}
        self._arrays_changed: dict[str, None] = {}

    @property
    def active(self) -> bool:
        return bool(self.waiters or self.arrays or self.held or self._prior)

    # -- what recovery tells ------------------------------------------------------------

    def known_end(self, job_id: str, state: JobState, name: str = "") -> None:
        self.outcomes[job_id] = state
        if name:
            self._names[job_id] = name
        self._changed[job_id] = None

    def known_elements(
        self, array_id: str, ended: Mapping[int, JobState], live: Collection[int]
    ) -> None:
        self._prior[array_id] = (dict(ended), set(live))

    # -- submission -----------------------------------------------------------------------

    def hold(self, sched: Scheduler, record: JobRecord, now: float) -> bool:
        """A job just submitted (pending): True if it stays out of the queue (it waits for
        dependencies, or it is an array's record)."""
        job = record.job
        if job.array is not None:
            self._open_array(sched, record)
        if job.after:
            self.held[record.id] = record
            for dep in dict.fromkeys(d.job for d in job.after):
                self.waiters.setdefault(dep, []).append(record.id)
                split = split_element(dep)
                if split is not None:
                    self._element_waits.setdefault(split[0], set()).add(dep)
            return self._check(sched, record, now, fresh=True)
        if job.array is not None:
            self.arrays[record.id].open = True
            self._arrays_changed[record.id] = None
            return True
        return False

    def _open_array(self, sched: Scheduler, record: JobRecord) -> None:
        spec = record.job.array
        assert spec is not None
        book = ArrayBook(record, spec)
        self.arrays[record.id] = book
        record.explanation = Explanation(Code.UNSCHEDULABLE, f"array of {book.size} elements")
        prior = self._prior.pop(record.id, None)
        if prior is None:
            return
        ended, live = prior
        book.made = set(ended) | live
        book.created = len(book.made)
        for index, state in sorted(ended.items()):
            book.note_ended(index, state, False)
        book.live = set(live)
        for index in live:
            element = sched.jobs.get(f"{record.id}[{index}]")
            if element is not None and element.state is JobState.RUNNING:
                book.running += 1
                book.started_lately += 1
        ran = book.running or any(s in _RAN for s in ended.values())
        if ran and record.state is JobState.PENDING:
            # it was running before the restart, as the driver knows: no action
            record.move(JobState.RUNNING, sched.now, "its elements ran before a restart")
            record.started = sched.now
        self._arrays_changed[record.id] = None

    # -- what the job book tells ----------------------------------------------------------

    def moved(self, record: JobRecord, source: JobState | None, target: JobState) -> None:
        """A job changed state (called by the job book for every change)."""
        job_id = record.id
        if job_id in self.waiters:
            self._changed[job_id] = None
        if target in TERMINAL:
            if self.remember or job_id in self.waiters:
                self.outcomes[job_id] = target
            if job_id in self.arrays:
                self._arrays_changed[job_id] = None
            if job_id in self.held:
                self._unhold(record)
        parent = record.job.array_of
        if parent is None or (source is None and target not in TERMINAL):
            return
        book = self.arrays.get(parent)
        index = record.job.array_index
        assert index is not None
        if book is None:
            prior = self._prior.get(parent)
            if prior is not None and target in TERMINAL:
                prior[1].discard(index)
                prior[0][index] = target
            return
        if target is JobState.RUNNING and source is JobState.PENDING:
            book.running += 1
            book.started_lately += 1
        elif source is JobState.RUNNING and target is JobState.PENDING:
            book.running -= 1
        if target in TERMINAL and index in book.live:
            # how far the array got is not news to its waiters (that would cost a look at
            # every one of them per element): ``explain`` says it when asked
            book.note_ended(index, target, source is JobState.RUNNING)
        self._arrays_changed[parent] = None

    # -- acting ---------------------------------------------------------------------------

    def settle(self, sched: Scheduler, now: float) -> bool:
        """Act on what changed, until nothing more does: held jobs released, cancelled or
        explained again; arrays started, ended, refilled. True if elements were created
        for an array some of whose elements started since it last was (another cycle may
        start them now)."""
        refilled = False
        while self._changed or self._arrays_changed:
            changed, self._changed = self._changed, {}
            for job_id in changed:
                for waiter in list(self.waiters.get(job_id, ())):
                    record = self.held.get(waiter)
                    if record is not None:
                        self._check(sched, record, now)
            arrays, self._arrays_changed = self._arrays_changed, {}
            for array_id in arrays:
                book = self.arrays.get(array_id)
                if book is not None:
                    refilled |= self._tend(sched, book, now)
        return refilled

    def cancel_element(self, sched: Scheduler, job_id: str, reason: str, now: float) -> bool:
        """Cancel an element not created yet (``JOB[7]``): it is created and cancelled, so
        it is never run and its end is recorded. False if there is no such element."""
        split = split_element(job_id)
        if split is None:
            return False
        book = self.arrays.get(split[0])
        index = split[1]
        if book is None or book.closed or index not in book.spec or book.exists(index):
            return False
        book.made.add(index)
        self._create(sched, book, index, now)
        sched._cancel(job_id, reason, now)
        return True

    def _create(self, sched: Scheduler, book: ArrayBook, index: int, now: float) -> None:
        book.note_created(index)
        sched._submit(element_job(book.record.job, index), 0, 0, now)

    def _tend(self, sched: Scheduler, book: ArrayBook, now: float) -> bool:
        """An array whose elements changed: start its record, end it, or create more."""
        record = book.record
        if record.state in TERMINAL:
            self._close(sched, book, now)
            return False
        if book.running and record.state is JobState.PENDING:
            record.started = now
            sched._move(record, JobState.RUNNING, now, "its first element started", Change.STARTED)
        refill = book.started_lately > 0
        book.started_lately = 0
        indexes = book.next_indexes()
        for index in indexes:
            self._create(sched, book, index, now)
        if book.finished:
            state, cause = book.outcome()
            if record.state is JobState.PENDING:
                state = JobState.CANCELLED  # none ran: a pending job can only be cancelled
            sched._end(record, state, now, cause)
            self._close(sched, book, now)
        return refill and bool(indexes)

    def _close(self, sched: Scheduler, book: ArrayBook, now: float) -> None:
        """The array ended (or was cancelled): its live elements are cancelled with it."""
        book.closed = True
        self.arrays.pop(book.record.id, None)
        state = book.record.state
        for index in sorted(book.live):
            sched._cancel(f"{book.record.id}[{index}]", f"its array was {state}", now)
        awaited = self._element_waits.pop(book.record.id, ())
        if awaited and state is not None:
            # those not created never will be (state_of), whether or not its record stays
            self.outcomes[book.record.id] = state
            self._changed.update(dict.fromkeys(e for e in awaited if e in self.waiters))

    # -- held jobs ------------------------------------------------------------------------

    def state_of(self, sched: Books, job_id: str) -> JobState | None:
        """A job's state as its waiters see it; an element its array ended without
        creating is cancelled (it never will be)."""
        record = sched.jobs.get(job_id)
        if record is not None and record.state is not None:
            return record.state
        known = self.outcomes.get(job_id)
        split = split_element(job_id) if known is None else None
        if split is not None and self.state_of(sched, split[0]) in TERMINAL:
            return JobState.CANCELLED
        return known

    def _check(self, sched: Scheduler, record: JobRecord, now: float, fresh: bool = False) -> bool:
        """Release a held job, cancel it, or say again what it waits for. ``fresh``: it is
        being submitted, and one whose dependencies are met already is not held at all
        (False: the caller puts it in the queue)."""
        if record.state in TERMINAL:
            self._unhold(record)
            return True
        waiting: list[Dependency] = []
        unmet: list[str] = []
        for dep in record.job.after:
            state = self.state_of(sched, dep.job)
            if state is None or state not in TERMINAL:
                waiting.append(dep)
            elif not dep.needs.met_by(state):
                unmet.append(f"{self._name(sched, dep.job)} {state}")
        if unmet:
            reason = "; ".join(unmet)
            if record.job.on_unmet is OnUnmet.CANCEL:
                self._unhold(record)
                sched._end(record, JobState.CANCELLED, now, reason)
                return True
            text = f"can never start: {reason} (on_unmet: keep; cancel it to end it)"
            self._explain(sched, record, Explanation(Code.UNRESOLVABLE, text))
        elif waiting:
            self._explain(sched, record, self._waiting(sched, waiting))
        elif fresh and record.job.array is None:
            self._unhold(record)
            return False
        else:
            self._release(sched, record, now, fresh)
        return True

    def explain(self, sched: Books, job_id: str) -> Explanation | None:
        """What a held job waits for now, with how far each of those jobs got (``etl-2
        (running, 3 of 5 done)``); None for a job that is not held. Computed on request: a
        held job's recorded explanation changes when what it waits for changes state."""
        record = self.held.get(job_id)
        if record is None:
            return None
        waiting = [
            dep
            for dep in record.job.after
            if (state := self.state_of(sched, dep.job)) is None or state not in TERMINAL
        ]
        return self._waiting(sched, waiting) if waiting else record.explanation

    def _waiting(self, sched: Books, deps: list[Dependency]) -> Explanation:
        text = "waiting for " + ", ".join(self._describe(sched, dep) for dep in deps)
        return Explanation(Code.UNSCHEDULABLE, text)

    def _explain(self, sched: Scheduler, record: JobRecord, explanation: Explanation) -> None:
        if record.explanation != explanation:
            record.explanation = explanation
            sched.emit(Pending(record.id, explanation))

    def _name(self, sched: Books, job_id: str) -> str:
        record = sched.jobs.get(job_id)
        if record is not None:
            return record.job.name or job_id
        split = split_element(job_id)
        if job_id not in self._names and split is not None:  # an element not created
            parent = self._name(sched, split[0])
            return job_id if parent == split[0] else f"{parent}[{split[1]}]"
        return self._names.get(job_id, job_id)

    def _describe(self, sched: Books, dep: Dependency) -> str:
        """``etl-2 (running, 3 of 5 done)``; ``eval (pending; needs failed)``."""
        record = sched.jobs.get(dep.job)
        needs = "" if dep.needs.value == "succeeded" else f"; needs {dep.needs}"
        if record is None or record.state is None:
            known = "not created yet" if split_element(dep.job) else "not known yet"
            return f"{self._name(sched, dep.job)} ({known}{needs})"
        name = record.job.name or dep.job
        book = self.arrays.get(dep.job)
        if book is not None:
            return f"{name} ({record.state}, {book.progress()}{needs})"
        replicas = record.job.replicas
        if record.state is JobState.RUNNING and replicas > 1:
            return f"{name} (running, {len(record.finished)} of {replicas} done{needs})"
        return f"{name} ({record.state}{needs})"

    def _unhold(self, record: JobRecord) -> None:
        if self.held.pop(record.id, None) is None:
            return
        for dep in dict.fromkeys(d.job for d in record.job.after):
            waiting = self.waiters.get(dep)
            if waiting is not None and record.id in waiting:
                waiting.remove(record.id)
                if not waiting:
                    del self.waiters[dep]

    def _release(self, sched: Scheduler, record: JobRecord, now: float, fresh: bool) -> None:
        """Every dependency is met: into the queue (an array: its elements may start)."""
        self._unhold(record)
        cause = "dependencies met: " + ", ".join(
            f"{self._name(sched, d.job)} {self.state_of(sched, d.job)}" for d in record.job.after
        )
        book = self.arrays.get(record.id)
        if fresh:  # an array submitted after what it waits for ended
            assert book is not None
            book.open = True
            self._arrays_changed[record.id] = None
            return
        record.history.append(Transition(record.id, now, record.state, JobState.PENDING, cause))
        since = record.queued_since
        record.queued_since = now
        sched.emit(
            JobTransition(
                record.id, now, record.state, JobState.PENDING, Change.RELEASED, cause,
                record.run, record.restarts, since,
            )
        )  # fmt: skip
        if book is not None:
            book.open = True
            self._arrays_changed[record.id] = None
            self._explain(
                sched, record, Explanation(Code.UNSCHEDULABLE, f"array: {book.progress()}")
            )
            return
        record.explanation = Explanation(Code.UNSCHEDULABLE, f"{cause}; not tried yet")
        sched._enter(record)
