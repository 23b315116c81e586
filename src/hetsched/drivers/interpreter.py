"""The action interpreter: how every driver carries out the core's actions.

The rules live here and nowhere else:

- **Bind** starts each task (one ``Executor.start`` call per Bind). A started task is
  *running* until its exit is reported.
- **Bind** hands each task the checkpoint the run resumes from (``Start.resume``).
- **Kill** stops the task if it is running (no notice, the driver's ``kill_grace_s``).
  **Preempt** and **Migrate** stop each task they name that is running, with the action's
  ``notice_s`` and ``grace_s`` (a Migrate's next run comes later as a Bind). A task asked
  to stop is *stopping* until its exit is reported. A task that is no longer running needs
  no stop: its exit is reported already, or on its way.
- **Checkpoints**: a driver hands what a task reports to :meth:`Interpreter.checkpointed`.
  A report for a running or stopping task is ``TaskCheckpointed`` for the core; when it
  comes from a job whose run is in its notice, every task of that run still in its notice
  is sent a second Stop with ``notice_s`` 0: the checkpoint is saved, so the wait ends
  early and SIGTERM (then SIGKILL after the grace) follows at once.
- **Allocations** are held by the core while a task runs or stops, and freed when its
  exit is reported; a Kill marked ``released`` (its node or device is gone) was freed
  already.
- **Run numbers** are in every task key, as the Bind gave them; a report always names the
  run it is about.
- **Reports**: the exit of a stopping task is ``TaskStopped`` (however it ended); the exit
  of a running task is ``TaskFinished`` with its status. Any other report is *stale* (an
  earlier run, or a task already reported) and is dropped: the core never sees it.
- **Pending, Reject, JobTransition, Preempt, Migrate** go to the driver's Observer, in
  order.
- **Lost work** (with ``lost_work=True``): a run stopped to be run again (a JobTransition
  ``preempted``, ``migrating``, ``lost`` or ``restarted``) lost the time from its last
  checkpoint (or its start) to that transition, nothing if it reported a checkpoint after
  it (inside its notice); the Observer hears it once the run's last task has ended.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hetsched.cluster.placement import Placement
from hetsched.drivers.executor import Executor, Exit, Observer, Start, Stop
from hetsched.keys import TaskKey
from hetsched.model.checkpoint import SavedCheckpoint
from hetsched.model.lifecycle import TERMINAL
from hetsched.scheduler.actions import (
    Action,
    Bind,
    Change,
    JobTransition,
    Kill,
    Migrate,
    Pending,
    Preempt,
    Reject,
)
from hetsched.scheduler.events import TaskCheckpointed, TaskFinished, TaskStopped

__all__ = ["Interpreter"]

#: transitions that stop a run to run the job again: what they throw away is lost work
_AGAIN = frozenset(
    {Change.PREEMPTED, Change.MIGRATING, Change.RESIZING, Change.LOST, Change.RESTARTED}
)


@dataclass(slots=True)
class _Run:
    """A run's times, for its lost work."""

    started: float
    tasks: int = 0
    checkpoint: float | None = None
    stopped: float | None = None


class Interpreter:
    """Carries out actions through ``executor`` and tells ``observer`` about jobs.

    ``kill_grace_s`` is how long a killed task gets between SIGTERM and SIGKILL (Preempt
    carries its own grace). One interpreter per core; not thread-safe.
    """

    def __init__(
        self,
        executor: Executor,
        observer: Observer | None = None,
        kill_grace_s: float = 0.0,
        lost_work: bool = False,
    ) -> None:
        self.executor = executor
        #: runs whose lost work is counted (``lost_work``): job -> run -> its times; a
        #: job's runs are forgotten when it ends or a later run starts
        self._runs: dict[str, dict[int, _Run]] | None = {} if lost_work else None
        self.observer = observer or Observer()
        self.kill_grace_s = kill_grace_s
        #: tasks started whose exit is not reported yet, with their placements
        self.running: dict[TaskKey, Placement] = {}
        #: tasks asked to stop whose exit is not reported yet
        self.stopping: dict[TaskKey, Placement] = {}
        #: stopping tasks that were given a notice (their Stop), until a checkpoint of
        #: their run ends it or their exit is reported
        self.noticed: dict[TaskKey, Stop] = {}

    # -- actions in ----------------------------------------------------------------------

    def carry_out(self, actions: Iterable[Action], now: float) -> None:
        """Carry out one ``handle`` call's actions, in order."""
        observer = self.observer
        for action in actions:
            match action:
                case JobTransition():
                    observer.transitioned(action)
                    if self._runs is not None:
                        self._transitioned(action)
                case Bind(job_id, run, placements, resume, replicas):
                    if self._runs is not None:
                        runs = self._runs.setdefault(job_id, {})
                        for old in [r for r in runs if r < run and runs[r].stopped is None]:
                            del runs[old]
                        entry = runs.setdefault(run, _Run(now))
                        entry.tasks += len(placements)
                    self._start(job_id, run, placements, resume, now, replicas)
                case Pending():
                    observer.pending(action)
                case Kill(job_id, task, run, reason, released):
                    key = TaskKey(job_id, task, run)
                    self._stop([key], now, 0.0, self.kill_grace_s, reason, released, "")
                case Preempt(job_id, run, tasks, grace_s, reason, preemptor, _kind, notice_s):
                    observer.preempted(action)
                    keys = [TaskKey(job_id, task, run) for task in tasks]
                    self._stop(keys, now, notice_s, grace_s, reason, False, preemptor)
                case Migrate(job_id, run, tasks, _to, notice_s, grace_s, reason, _kind, for_job):
                    observer.migrating(action)
                    keys = [TaskKey(job_id, task, run) for task in tasks]
                    self._stop(keys, now, notice_s, grace_s, reason, False, for_job)
                case Reject():
                    observer.rejected(action)
                case _:  # pragma: no cover
                    raise TypeError(f"unknown action {action!r}")

    def _start(
        self,
        job_id: str,
        run: int,
        placements: Sequence[tuple[int, Placement]],
        resume: SavedCheckpoint | None,
        now: float,
        replicas: int = 0,
    ) -> None:
        starts = []
        for task, placement in placements:
            key = TaskKey(job_id, task, run)
            self.running[key] = placement
            starts.append(Start(key, placement, resume, None, replicas))
        self.executor.start(starts, now)

    def _stop(
        self,
        keys: Sequence[TaskKey],
        now: float,
        notice_s: float,
        grace_s: float,
        reason: str,
        released: bool,
        preemptor: str,
    ) -> None:
        stops = []
        for key in keys:
            placement = self.running.pop(key, None)
            if placement is None:
                continue  # it ended already: its exit report is the answer
            self.stopping[key] = placement
            stop = Stop(key, placement, notice_s, grace_s, reason, released, preemptor)
            if notice_s > 0:
                self.noticed[key] = stop
            stops.append(stop)
        if stops:
            self.executor.stop(stops, now)

    # -- reports out ---------------------------------------------------------------------

    def report(self, exit_: Exit) -> TaskFinished | TaskStopped | None:
        """The event the core expects for a task's end, or None if the report is stale."""
        key = exit_.key
        self.noticed.pop(key, None)
        if self.stopping.pop(key, None) is not None:
            self._ended(key)
            return TaskStopped(key.job, key.task, key.run)
        if self.running.pop(key, None) is not None:
            self._ended(key)
            return TaskFinished(key.job, key.task, key.run, exit_.succeeded, exit_.reason)
        return None

    # -- lost work -----------------------------------------------------------------------

    def _transitioned(self, change: JobTransition) -> None:
        assert self._runs is not None
        runs = self._runs.get(change.job_id)
        if runs is None:
            return
        if change.target in TERMINAL:
            del self._runs[change.job_id]
            return
        entry = runs.get(change.run)
        if change.change in _AGAIN and entry is not None and entry.stopped is None:
            entry.stopped = change.time
            if entry.tasks <= 0:
                self._tell_lost(change.job_id, change.run)

    def _ended(self, key: TaskKey) -> None:
        if self._runs is None:
            return
        entry = self._runs.get(key.job, {}).get(key.run)
        if entry is not None:
            entry.tasks -= 1
            if entry.tasks <= 0 and entry.stopped is not None:
                self._tell_lost(key.job, key.run)

    def _tell_lost(self, job_id: str, run: int) -> None:
        assert self._runs is not None
        entry = self._runs[job_id].pop(run)
        assert entry.stopped is not None
        saved = entry.checkpoint
        if saved is not None and saved >= entry.stopped:
            lost = 0.0  # it saved inside its notice
        else:
            lost = max(0.0, entry.stopped - max(entry.started, saved or entry.started))
        self.observer.lost_work(job_id, run, lost)

    def checkpointed(
        self,
        key: TaskKey,
        now: float,
        step: int | None = None,
        path: str = "",
        progress: float | None = None,
        at: float | None = None,
    ) -> TaskCheckpointed | None:
        """Task ``key`` reported a checkpoint: the event for the core, or None when the task
        neither runs nor stops (a stale report). Ends the notice of its run (see the module
        docstring)."""
        if key not in self.running and key not in self.stopping:
            return None
        if self._runs is not None:
            entry = self._runs.get(key.job, {}).get(key.run)
            if entry is not None:
                stamp = now if at is None else min(at, now)
                entry.checkpoint = max(stamp, entry.checkpoint or stamp)
        ended = [stop for k, stop in self.noticed.items() if k.job == key.job and k.run == key.run]
        for stop in ended:
            del self.noticed[stop.key]
        if ended:
            early = [
                Stop(s.key, s.placement, 0.0, s.grace_s, s.reason, s.released, s.preemptor)
                for s in ended
            ]
            self.executor.stop(early, now)
        return TaskCheckpointed(key.job, key.task, key.run, step, path, progress, at)

    def adopt(
        self,
        key: TaskKey,
        placement: Placement,
        started: float | None = None,
        checkpoint: float | None = None,
        stop: Stop | None = None,
        stopped_at: float | None = None,
    ) -> None:
        """A task that runs already (taken back after a driver restart, or bound by someone
        else and accounted): it is running, and its exit will be reported.

        ``stop``: it was asked to stop already (its Stop; one with a notice is a notice in
        progress, which a checkpoint of its run ends early, as for a stop given here). With
        ``started`` (when its run started), ``checkpoint`` (the time of the run's last
        checkpoint, if any) and ``stopped_at`` (when the run was stopped to run again), the
        run's lost work is counted as for a run this interpreter started."""
        if stop is None:
            self.running[key] = placement
        else:
            self.stopping[key] = placement
            if stop.notice_s > 0:
                self.noticed[key] = stop
        if self._runs is None or started is None:
            return
        entry = self._runs.setdefault(key.job, {}).setdefault(key.run, _Run(started))
        entry.tasks += 1
        if checkpoint is not None:
            entry.checkpoint = max(checkpoint, entry.checkpoint or checkpoint)
        if stopped_at is not None:
            entry.stopped = stopped_at
