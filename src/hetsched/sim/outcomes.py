"""What happened to each job of a replay, kept in columns.

A replay of a million jobs cannot afford an object per job: :class:`OutcomeTable` keeps one
array per field (times as float64 with NaN for "not yet", counts as int32, the user, queue
and state as codes into small tables of distinct values, reasons as shared strings), about
100 bytes a job besides its id. It is a read-only sequence of :class:`JobOutcome`:
``table[i]`` builds the record of job ``i`` (in workload order) on demand, so code that
reads outcomes one by one works as before, and the metrics read
:meth:`OutcomeTable.columns` directly.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsched.model.lifecycle import JobState
from hetsched.sim.lazyrows import LazyRows

__all__ = ["STATES", "STATE_CODE", "Columns", "JobOutcome", "OutcomeTable", "outcome_columns"]

#: a float64 column, an int32 column, ... (one value per job)
Column = np.ndarray[Any, Any]


@dataclass(slots=True)
class JobOutcome:
    """What happened to one job, as the core told it. Times in virtual seconds."""

    job_id: str
    user: str
    queue: str
    priority: int
    tasks: int
    devices: int
    duration_s: float
    submit: float
    state: JobState = JobState.PENDING
    first_start: float | None = None
    last_start: float | None = None
    end: float | None = None
    run: int = 0
    finished_in_run: int = 0
    preemptions: int = 0
    #: requeues other than preemptions: a node or device it ran on went away, or a task
    #: failed and its restart policy ran it again
    restarts: int = 0
    #: task-seconds of work thrown away by stops: since the last checkpoint (or the run's
    #: start) of each stopped run
    lost_work_s: float = 0.0
    #: task-seconds spent writing checkpoints (no progress meanwhile)
    checkpoint_s: float = 0.0
    #: times it was moved (migrations: defragmentation, upgrades)
    migrations: int = 0
    #: the last pending explanation (first line), or why it was rejected, failed or
    #: requeued after losing a node or device or failing a task
    reason: str = ""
    #: the job's dominant share of the cluster: max over CPU and its device class of
    #: (what all its tasks ask) / (the cluster's capacity at the start)
    demand_share: float = 0.0
    #: users with jobs in the system just after it arrived (its own included)
    contenders: int = 1

    @property
    def wait_s(self) -> float | None:
        return None if self.first_start is None else self.first_start - self.submit

    @property
    def jct_s(self) -> float | None:
        if self.end is None or self.state is not JobState.SUCCEEDED:
            return None
        return self.end - self.submit


#: the states in code order (a state's code is its index)
STATES: tuple[JobState, ...] = tuple(JobState)
STATE_CODE: dict[JobState, int] = {s: i for i, s in enumerate(STATES)}
_FLOATS: tuple[str, ...] = ("duration_s", "submit", "first_start", "last_start", "end")
_FLOATS += ("lost_work_s", "checkpoint_s", "demand_share")
_INTS: tuple[str, ...] = ("priority", "tasks", "devices", "run", "finished_in_run")
_INTS += ("preemptions", "restarts", "migrations", "contenders")
#: numpy dtypes of the array typecodes: float64 for times, int64 for priorities (any
#: integer a trace gives), int32 for counts and codes, int8 for states
_DTYPE = {"d": np.float64, "q": np.int64, "i": np.int32, "b": np.int8}


@dataclass(frozen=True, slots=True)
class Columns:
    """Per-job columns in workload order (what the metrics need); times NaN when unset.
    ``user``, ``queue`` and ``state`` are codes into ``users``, ``queues`` and ``states``."""

    user: Column
    queue: Column
    state: Column
    submit: Column
    first_start: Column
    end: Column
    duration_s: Column
    demand_share: Column
    contenders: Column
    users: tuple[str, ...]
    queues: tuple[str, ...]
    states: tuple[JobState, ...]


class _Codes:
    """Distinct strings and their codes, in first-seen order."""

    __slots__ = ("codes", "names")

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.names: list[str] = []

    def code(self, name: str) -> int:
        code = self.codes.get(name)
        if code is None:
            code = self.codes[name] = len(self.names)
            self.names.append(name)
        return code


def _filled(typecode: str, value: float, size: int) -> array[Any]:
    return array(typecode, [value]) * size


class OutcomeTable(LazyRows[JobOutcome]):
    """Outcomes of up to ``size`` jobs (see the module docstring), one preallocated
    column per field. The engine appends a row per job with :meth:`add_job` and then
    writes the columns by row index (``table.end[row] = now``): plain arrays, so a write
    costs what a list's does, and :meth:`columns` hands numpy views of them, not copies.
    Reasons are kept as interned strings (one object per distinct text)."""

    def __init__(self, size: int) -> None:
        self.ids: list[str] = []
        self.users = _Codes()
        self.queues = _Codes()
        self.reason: list[str] = [""] * size
        nan = math.nan
        self.duration_s = _filled("d", 0.0, size)
        self.submit = _filled("d", 0.0, size)
        self.first_start = _filled("d", nan, size)
        self.last_start = _filled("d", nan, size)
        self.end = _filled("d", nan, size)
        self.lost_work_s = _filled("d", 0.0, size)
        self.checkpoint_s = _filled("d", 0.0, size)
        self.demand_share = _filled("d", 0.0, size)
        self.priority = _filled("q", 0, size)
        self.tasks = _filled("i", 0, size)
        self.devices = _filled("i", 0, size)
        self.run = _filled("i", 0, size)
        self.finished_in_run = _filled("i", 0, size)
        self.preemptions = _filled("i", 0, size)
        self.restarts = _filled("i", 0, size)
        self.migrations = _filled("i", 0, size)
        self.contenders = _filled("i", 1, size)
        self.user = _filled("i", 0, size)
        self.queue = _filled("i", 0, size)
        self.state = _filled("b", STATE_CODE[JobState.PENDING], size)

    def add_job(
        self,
        job_id: str,
        user: str,
        queue: str,
        priority: int,
        tasks: int,
        devices: int,
        duration_s: float,
        submit: float,
        demand_share: float,
    ) -> int:
        """Append a pending job's row (what is known when it is read); returns its row."""
        row = len(self.ids)
        if row == len(self.state):
            raise IndexError(f"the table holds {row} jobs")
        self.ids.append(job_id)
        self.user[row] = self.users.code(user)
        self.queue[row] = self.queues.code(queue)
        self.priority[row] = priority
        self.tasks[row] = tasks
        self.devices[row] = devices
        self.duration_s[row] = duration_s
        self.submit[row] = submit
        self.demand_share[row] = demand_share
        return row

    def add(self, outcome: JobOutcome) -> int:
        """Append a row holding ``outcome``; returns its row."""
        o = outcome
        row = self.add_job(
            o.job_id, o.user, o.queue, o.priority, o.tasks, o.devices, o.duration_s, o.submit, 0.0
        )
        for name in _FLOATS:
            value = getattr(o, name)
            getattr(self, name)[row] = math.nan if value is None else value
        for name in _INTS:
            getattr(self, name)[row] = getattr(o, name)
        self.state[row] = STATE_CODE[o.state]
        self.set_reason(row, o.reason)
        return row

    def set_reason(self, row: int, reason: str) -> None:
        self.reason[row] = sys.intern(reason)

    # -- reading --------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.ids)

    def _row(self, row: int) -> JobOutcome:
        first, last, end = self.first_start[row], self.last_start[row], self.end[row]
        return JobOutcome(
            job_id=self.ids[row],
            user=self.users.names[self.user[row]],
            queue=self.queues.names[self.queue[row]],
            priority=self.priority[row],
            tasks=self.tasks[row],
            devices=self.devices[row],
            duration_s=self.duration_s[row],
            submit=self.submit[row],
            state=STATES[self.state[row]],
            first_start=None if math.isnan(first) else first,
            last_start=None if math.isnan(last) else last,
            end=None if math.isnan(end) else end,
            run=self.run[row],
            finished_in_run=self.finished_in_run[row],
            preemptions=self.preemptions[row],
            restarts=self.restarts[row],
            lost_work_s=self.lost_work_s[row],
            checkpoint_s=self.checkpoint_s[row],
            migrations=self.migrations[row],
            reason=self.reason[row],
            demand_share=self.demand_share[row],
            contenders=self.contenders[row],
        )

    def __repr__(self) -> str:
        return f"OutcomeTable({len(self)} jobs)"

    def _view(self, name: str) -> Column:
        column = getattr(self, name)
        return np.frombuffer(column, _DTYPE[column.typecode])[: len(self)]

    def columns(self) -> Columns:
        """The columns the metrics read (views of the filled rows, not copies)."""
        view = self._view
        return Columns(
            user=view("user"),
            queue=view("queue"),
            state=view("state"),
            submit=view("submit"),
            first_start=view("first_start"),
            end=view("end"),
            duration_s=view("duration_s"),
            demand_share=view("demand_share"),
            contenders=view("contenders"),
            users=tuple(self.users.names),
            queues=tuple(self.queues.names),
            states=STATES,
        )


def outcome_columns(jobs: Sequence[JobOutcome]) -> Columns:
    """The metrics' columns of any sequence of outcomes (a table's own, or built)."""
    if isinstance(jobs, OutcomeTable):
        return jobs.columns()
    table = OutcomeTable(len(jobs))
    for job in jobs:
        table.add(job)
    return table.columns()
