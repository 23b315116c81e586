"""The simulator's book of work: which jobs run on work rather than on a fixed duration, how
fast each run goes, what it saves and when it ends.

A job is *tracked* when it says anything about its speed (``hetsched.model.speed``) or
declares checkpointing; every other job runs for its duration from each start, exactly as
before work existed (the engine keeps that path, so replays without these columns give the
same numbers). A tracked job's run (:class:`~hetsched.sim.progress.RunProgress`) starts from
the checkpoint its Bind resumes from and runs at the job's rate on the slowest device model
of its tasks (an elastic job's run with fewer tasks than its ``replicas``: at the table's
rate for its size, or in proportion to its count); periodic checkpoints are reported to
the core as ``TaskCheckpointed`` with the time they were written, in the first batch the
engine hands the core after it (:meth:`Work.due`): a checkpoint only matters to a decision,
and decisions happen in batches.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hetsched.cluster.placement import Placement
from hetsched.keys import TaskKey
from hetsched.model.checkpoint import SavedCheckpoint
from hetsched.model.device import Node
from hetsched.model.job import Job
from hetsched.model.speed import SpeedError, Speeds, SpeedTable, resolve
from hetsched.sim.progress import RunProgress, Saving

__all__ = ["Due", "Work"]


@dataclass(frozen=True, slots=True)
class Due:
    """A checkpoint to report: task ``key`` saved ``progress`` work at ``at``."""

    key: TaskKey
    progress: float
    at: float


@dataclass(slots=True)
class _Run:
    progress: RunProgress
    #: the task that reports the run's checkpoints (its first)
    reporter: TaskKey
    #: when the run was stopped (its saves after that never happen)
    stopped: float | None = None
    saving: Saving | None = None


class Work:
    """Work of the tracked jobs of one replay (see the module docstring)."""

    def __init__(self, nodes: Sequence[Node], table: SpeedTable | None) -> None:
        self._table = table
        self._model = {d.id: d.model for n in nodes for d in n.devices}
        self._jobs: dict[str, tuple[Job, float]] = {}
        self._speeds: dict[str, Speeds] = {}
        #: job -> run -> its run: the last run of each job, and the runs a later run resumed
        #: from (a run after it can resume from the same checkpoint); dropped when it ends
        self._runs: dict[str, dict[int, _Run]] = {}
        self._last: dict[str, int] = {}
        self._saves: list[tuple[float, int, str, int]] = []
        self._seq = 0

    def track(self, job: Job, duration_s: float) -> bool:
        """Note a job of the workload; True when it runs on work (tracked)."""
        if not job.speed.known and job.checkpoint is None:
            return False
        self._jobs[job.id] = (job, duration_s)
        return True

    def speeds(self, job_id: str) -> Speeds:
        speeds = self._speeds.get(job_id)
        if speeds is None:
            job, duration = self._jobs[job_id]
            try:
                speeds = resolve(job, self._table, duration)
            except SpeedError as exc:
                raise SpeedError(f"job {job_id}: {exc}") from None
            self._speeds[job_id] = speeds
        return speeds

    def _rate(self, speeds: Speeds, placements: Sequence[Placement]) -> float:
        rates = [
            speeds.on(self._model.get(p.devices[0].device_id, "") if p.devices else "")
            for p in placements
        ]
        return min(rates, default=speeds.default)

    def _elastic_rate(self, job: Job, speeds: Speeds, placements: Sequence[Placement]) -> float:
        """The rate of a run of an elastic job with ``len(placements)`` tasks: the profile's
        throughput table at that size when the job names a type the table lists at several
        sizes (a scaling table, as Pollux and Sia measure it), else linear in the count."""
        count = len(placements)
        rate = self._rate(speeds, placements)
        if count >= job.replicas or not job.elastic:
            return rate
        job_type = job.speed.job_type
        table = self._table
        if job_type is not None and not job.speed.rates and table is not None:
            smaller = replace(job, replicas=count, min_replicas=None)
            _, duration = self._jobs[job.id]
            return self._rate(resolve(smaller, table, duration), placements)
        return rate * count / job.replicas

    def start(
        self,
        key: TaskKey,
        placements: Sequence[Placement],
        resume: SavedCheckpoint | None,
        now: float,
    ) -> float:
        """Tasks of run ``key.run`` start (the run's first Bind, or more of its tasks):
        when they finish."""
        job_id = key.job
        runs = self._runs.setdefault(job_id, {})
        run = runs.get(key.run)
        if run is not None:
            return run.progress.end()
        job, _ = self._jobs[job_id]
        speeds = self.speeds(job_id)
        spec = job.checkpoint
        progress = RunProgress(
            now,
            self._resumed(job_id, resume),
            speeds.work,
            self._elastic_rate(job, speeds, placements),
            None if spec is None else spec.interval_s,
            0.0 if spec is None else spec.cost_s,
        )
        last = self._last.get(job_id)
        if last is not None and (resume is None or resume.run != last):
            runs.pop(last, None)
        self._last[job_id] = key.run
        runs[key.run] = _Run(progress, key)
        self._schedule(job_id, key.run, now)
        return progress.end()

    def _resumed(self, job_id: str, resume: SavedCheckpoint | None) -> float:
        """The work a run resuming from ``resume`` starts with."""
        if resume is None:
            return 0.0
        if resume.progress is not None:
            return resume.progress
        earlier = self._run(job_id, resume.run)
        return 0.0 if earlier is None else earlier.progress.work_at(resume.time)

    def _schedule(self, job_id: str, run: int, after: float) -> None:
        entry = self._runs[job_id][run]
        at = entry.progress.next_save(after)
        if at is not None:
            self._seq += 1
            heapq.heappush(self._saves, (at, self._seq, job_id, run))

    def due(self, now: float) -> list[Due]:
        """Periodic checkpoints written by ``now`` and not reported yet, oldest first."""
        out: list[Due] = []
        saves = self._saves
        while saves and saves[0][0] <= now:
            at, _, job_id, run = heapq.heappop(saves)
            entry = self._run(job_id, run)
            if entry is None or (entry.stopped is not None and entry.stopped < at):
                continue
            work, _ = entry.progress.saved_at(at)
            out.append(Due(entry.reporter, work, at))
            if entry.stopped is None:
                self._schedule(job_id, run, at)
        return out

    def stop(self, key: TaskKey, notice_s: float, now: float) -> tuple[Saving, bool] | None:
        """The run of task ``key`` is stopped at ``now``: what it keeps, and whether this is
        the run's first stopped task (the answer is the run's, the same for each of its
        tasks); None for a run this book does not know."""
        entry = self._run(key.job, key.run)
        if entry is None:
            return None
        if entry.saving is not None:
            return entry.saving, False
        job, _ = self._jobs[key.job]
        entry.stopped = now
        entry.saving = entry.progress.stop(now, notice_s, job.checkpoint is not None)
        return entry.saving, True

    def finished(self, key: TaskKey, now: float) -> float:
        """Task ``key`` finished its work: the seconds its run spent writing checkpoints."""
        entry = self._run(key.job, key.run)
        return 0.0 if entry is None else entry.progress.writing_s(now)

    def forget(self, job_id: str) -> None:
        """The job ended: nothing of it is read again (a stop or exit reported for it after
        its end finds no run and counts nothing, as before it was forgotten), so all of it
        goes: its job, speeds and runs. Its next periodic save, if one was queued, stays
        on the heap until its time and is skipped then."""
        self._jobs.pop(job_id, None)
        self._speeds.pop(job_id, None)
        self._runs.pop(job_id, None)
        self._last.pop(job_id, None)

    def held(self, job_id: str) -> bool:
        """Whether anything of the job is still kept (False once it is forgotten)."""
        return any(job_id in book for book in (self._jobs, self._speeds, self._runs, self._last))

    def _run(self, job_id: str, run: int) -> _Run | None:
        runs = self._runs.get(job_id)
        return None if runs is None else runs.get(run)
