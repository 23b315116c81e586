"""What the core knows of a job's progress in round mode: an estimate from its own books.

The core sees no steps: it knows when each run started, on which device model, the job's
rate there (its speed model) and the checkpoints its tasks reported. So it credits a run
with ``rate x running time`` and keeps, of a run that stopped, what its last checkpoint
saved: everything up to the stop for a job that checkpoints continuously (the core notes
that checkpoint itself), up to the checkpoint's time otherwise, and nothing without one (the
next run starts where the job's last checkpoint left it). A checkpoint that carries the
work done (``progress``, which the simulator reports) replaces the estimate.

Round policies read ``remaining = work - done`` (finish-time fairness, makespan,
``fair-srtf``) and the isolated time each job has earned (finish-time fairness).
The estimate is refreshed at round boundaries only, which is where it is read.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsched.model.checkpoint import SavedCheckpoint
from hetsched.model.lifecycle import JobState
from hetsched.scheduler.records import JobRecord

__all__ = ["ProgressBook"]


@dataclass(slots=True)
class _Run:
    """The run the estimate follows, and the job's last checkpoint, valued."""

    run: int = 0
    start: float | None = None
    rate: float = 0.0
    #: work done when the run started (what it resumed from)
    base: float = 0.0
    saved: SavedCheckpoint | None = None
    saved_value: float = 0.0


class ProgressBook:
    """Estimated work done per job (see the module docstring)."""

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}

    def forget(self, job_id: str) -> None:
        self._runs.pop(job_id, None)

    def keep_only(self, job_ids: set[str]) -> None:
        for job_id in [j for j in self._runs if j not in job_ids]:
            del self._runs[job_id]

    def _value(self, entry: _Run, saved: SavedCheckpoint | None) -> float:
        """The work a checkpoint holds: its own word, else the estimate of its run."""
        if saved is None:
            return 0.0
        if saved is entry.saved:
            return entry.saved_value
        if saved.progress is not None:
            return float(saved.progress)
        if saved.run == entry.run and entry.start is not None:
            return entry.base + entry.rate * max(saved.time - entry.start, 0.0)
        return entry.saved_value  # of a run this book did not follow: the last it knew

    def done(self, record: JobRecord, rate: float, now: float) -> float:
        """Work done by ``record`` at ``now``; ``rate`` is its rate where it runs now (any
        value while it waits)."""
        entry = self._runs.setdefault(record.id, _Run())
        running = record.state is JobState.RUNNING and record.started is not None
        if running and record.run != entry.run:
            # a new run began: it resumed from the job's checkpoint, valued with the old run
            entry.saved_value = self._value(entry, record.checkpoint)
            entry.saved = record.checkpoint
            entry.base = entry.saved_value
            entry.run, entry.start, entry.rate = record.run, record.started, rate
        elif record.checkpoint is not entry.saved:
            saved = record.checkpoint
            entry.saved_value = self._value(entry, saved)
            entry.saved = saved
            # the driver's word on this run's work: the run goes on from it
            if (
                running
                and saved is not None
                and saved.progress is not None
                and (saved.run == entry.run)
            ):
                entry.base, entry.start = entry.saved_value, saved.time
        if running and entry.start is not None:
            return entry.base + entry.rate * max(now - entry.start, 0.0)
        return entry.saved_value
