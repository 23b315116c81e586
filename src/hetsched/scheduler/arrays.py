"""The core's book of one job array: which elements exist, how many wait and run, how
their ends add up. Elements are created as they may run (:meth:`ArrayBook.next_indexes`):
never more than ``WINDOW`` of them wait in the queue at once, nor more than the array's cap
live at once, so a scheduling cycle's cost does not grow with the elements not created
yet, and an array of 100,000 elements is one record until they run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetsched.model.job import Job
from hetsched.model.lifecycle import JobState
from hetsched.model.workflow import ArraySpec
from hetsched.scheduler.records import JobRecord

__all__ = ["WINDOW", "ArrayBook", "element_job"]

#: the most elements of one array waiting in the queue at once
WINDOW = 64


def element_job(parent: Job, index: int) -> Job:
    """Element ``index`` of array ``parent`` (:meth:`Job.element`)."""
    return parent.element(index)


@dataclass(slots=True, eq=False)
class ArrayBook:
    """One array: its record (the parent job) and its elements' counts."""

    record: JobRecord
    spec: ArraySpec
    #: the next position of ``spec`` to create (positions below it exist or existed)
    next_pos: int = 0
    #: indexes created out of order (an element cancelled before its turn; recovery's)
    made: set[int] = field(default_factory=set)
    created: int = 0
    #: created and not ended, and of those, running
    live: set[int] = field(default_factory=set)
    running: int = 0
    #: elements ended, by state; the indexes of those that did not succeed, ascending
    ended: dict[JobState, int] = field(default_factory=dict)
    unsuccessful: list[int] = field(default_factory=list)
    #: elements started since the array last created more (a cycle drained its window)
    started_lately: int = 0
    #: the dependencies are met: elements may be created
    open: bool = False
    #: the array ended (all done, or cancelled): nothing more is created
    closed: bool = False

    @property
    def size(self) -> int:
        return len(self.spec)

    @property
    def waiting(self) -> int:
        return len(self.live) - self.running

    @property
    def done(self) -> int:
        return sum(self.ended.values())

    def next_indexes(self) -> list[int]:
        """The indexes to create now: up to the window of waiting elements and the cap."""
        if not self.open or self.closed:
            return []
        room = WINDOW - self.waiting
        if self.spec.cap is not None:
            room = min(room, self.spec.cap - len(self.live))
        out: list[int] = []
        size = self.size
        while room > 0 and self.next_pos < size:
            index = self.spec.at(self.next_pos)
            self.next_pos += 1
            if index in self.made:
                self.made.discard(index)
                continue
            out.append(index)
            room -= 1
        return out

    def exists(self, index: int) -> bool:
        """Whether element ``index`` was created (it may have ended since)."""
        if index in self.made or index in self.live:
            return True
        return self.next_pos > 0 and index <= self.spec.at(self.next_pos - 1)

    def note_created(self, index: int) -> None:
        self.created += 1
        self.live.add(index)

    def note_ended(self, index: int, state: JobState, was_running: bool) -> None:
        self.live.discard(index)
        if was_running:
            self.running -= 1
        self.ended[state] = self.ended.get(state, 0) + 1
        if state is not JobState.SUCCEEDED:
            self.unsuccessful.append(index)

    @property
    def finished(self) -> bool:
        return self.created >= self.size and not self.live

    def outcome(self) -> tuple[JobState, str]:
        """The array's end once every element ended: succeeded if all did."""
        size = self.size
        bad = sorted(self.unsuccessful)
        if not bad:
            return JobState.SUCCEEDED, f"all {size} elements succeeded"
        shown = ", ".join(str(i) for i in bad[:20]) + (", ..." if len(bad) > 20 else "")
        return JobState.FAILED, f"{len(bad)} of {size} elements did not succeed: {shown}"

    def progress(self) -> str:
        """``37 of 500 done`` (and how many failed)."""
        text = f"{self.done} of {self.size} done"
        if self.unsuccessful:
            text += f", {len(self.unsuccessful)} did not succeed"
        return text
