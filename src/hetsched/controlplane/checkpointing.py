"""The checkpoint protocol of ``hetsched up``: what the launcher tells a task, the notices
it sends, and the reports it collects (docs/checkpointing.md).

The machine-side pieces (directories, the report file, the notice file, the environment)
are :mod:`hetsched.agent.checkpoints`; task tokens are :mod:`hetsched.controlplane.tasktokens`.
This module puts them together for the launcher and the reconcile loop: a report comes
from the task's ``CHECKPOINT`` file (polled every turn) or from ``POST /v1/checkpoints``
(``hetsched checkpoint``), and either way reaches the core as ``TaskCheckpointed``.
Progress reports (steps done) come the same two ways (the ``PROGRESS`` file, ``POST
/v1/progress``) and go to the service's speed learner, not to the core.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from hetsched.agent.checkpoints import CheckpointDirs, Report, ReportWatcher, task_env
from hetsched.agent.progress import Progress, ProgressWatcher
from hetsched.controlplane.tasktokens import TaskTokens
from hetsched.drivers import Start, Stop
from hetsched.drivers.executor import RunAs
from hetsched.keys import TaskKey
from hetsched.model.checkpoint import DEFAULT_SIGNAL
from hetsched.model.job import Job

__all__ = ["REPORT_POLL_S", "CheckpointProtocol", "hetsched_bin"]

#: how often the report files of the jobs that run here are looked at
REPORT_POLL_S = 0.25


def hetsched_bin() -> str:
    """The folder of the ``hetsched`` command tasks call (``hetsched checkpoint``): the one
    next to this interpreter, else the one on the service's PATH."""
    here = Path(sys.executable).parent
    if (here / "hetsched").exists():
        return str(here)
    found = shutil.which("hetsched")
    return str(Path(found).parent) if found else str(here)


class CheckpointProtocol:
    """The checkpoint protocol for the tasks of one service home.

    ``remote``: the tasks run on other machines (the Ray executor), which do not share the
    home: they are told only how to report through the API (``HETSCHED_API``, their token,
    the CA bundle) and where to resume from; no checkpoint directory, report file or
    notice file is made or read for them (a notice is its signal alone)."""

    def __init__(
        self,
        home: Path,
        api: str = "http://127.0.0.1:8780",
        ca_pem: str | None = None,
        remote: bool = False,
    ) -> None:
        self.dirs = CheckpointDirs(home)
        self.tokens = TaskTokens(home)
        self.watcher = ReportWatcher(self.dirs)
        self.progress_watcher = ProgressWatcher(self.dirs)
        #: the API's address as tasks reach it (set once the server listens)
        self.api = api
        #: the CA bundle (PEM) tasks verify an https ``api`` with (None: their system's)
        self.ca_pem = ca_pem
        self.remote = remote
        self.bin_dir = hetsched_bin()
        self._polled_at = 0.0
        #: where a report made through the API goes (the reconcile loop sets it)
        self.deliver: Callable[[TaskKey, Report], None] | None = None
        #: where a progress report made through the API goes (the reconcile loop sets it)
        self.deliver_progress: Callable[[TaskKey, Progress], None] | None = None

    def env(self, start: Start, job: Job, run_as: RunAs | None, path: str | None) -> dict[str, str]:
        """Prepare the job's checkpoint directory and say what the task is told."""
        if self.remote:
            return self._remote_env(start, job)
        owner = (run_as.uid, run_as.gid) if run_as is not None else None
        directory = self.dirs.prepare(start.key.job, owner)
        self.watcher.watch(start.key.job)
        self.progress_watcher.watch(start.key.job)
        return task_env(
            directory,
            start.resume,
            job.checkpoint,
            self.api,
            self.tokens.issue(start.key),
            self.bin_dir,
            path if path is not None else os.environ.get("PATH", ""),
            ca_pem=self.ca_pem,
        )

    def _remote_env(self, start: Start, job: Job) -> dict[str, str]:
        """What a task on another machine is told: how to report, and where to resume."""
        spec, resume = job.checkpoint, start.resume
        env = {
            "HETSCHED_API": self.api,
            "HETSCHED_TASK_TOKEN": self.tokens.issue(start.key),
            "HETSCHED_NOTICE_SIGNAL": spec.signal if spec is not None else DEFAULT_SIGNAL,
        }
        if self.ca_pem is not None:
            env["HETSCHED_CA_PEM"] = self.ca_pem
        if spec is not None and spec.interval_s is not None:
            env["HETSCHED_CHECKPOINT_INTERVAL"] = f"{spec.interval_s:g}"
        if resume is not None and resume.path:
            env["HETSCHED_RESUME_FROM"] = resume.path
        if resume is not None and resume.step is not None:
            env["HETSCHED_RESUME_STEP"] = str(resume.step)
        return env

    def watch(self, job_id: str) -> None:
        """Look at the job's report files again (an adopted task's), unless remote."""
        if not self.remote:
            self.watcher.watch(job_id)

    def notify(self, stop: Stop, job: Job | None, now: float) -> str:
        """Write the notice file of a stop with a notice (unless remote); the signal to
        send."""
        signal = job.checkpoint.signal if job is not None and job.checkpoint else DEFAULT_SIGNAL
        if not self.remote:
            self.dirs.notify(stop.key.job, now + stop.notice_s, signal, stop.reason)
        return signal

    def reports(self, running: Iterable[TaskKey]) -> list[tuple[TaskKey, Report]]:
        """Reports written to the jobs' ``CHECKPOINT`` files since the last look, each for
        a task of its job's newest run that runs here (its first task). A job with no task
        in ``running`` is no longer watched (its next run watches it again)."""
        self._polled_at = time.time()
        found = self.watcher.poll()
        newest = _newest(running)
        for job_id in self.watcher.watched():
            if job_id not in newest:
                self.watcher.forget(job_id)
        return [(newest[job], report) for job, report in found if job in newest]

    def progress(self, running: Iterable[TaskKey]) -> list[tuple[TaskKey, Progress]]:
        """Progress files written since the last look (called right after :meth:`reports`),
        each for the newest run's first task of its job that runs here."""
        newest = _newest(running)
        for job_id in self.progress_watcher.watched():
            if job_id not in newest:
                self.progress_watcher.forget(job_id)
        return [(newest[j], p) for j, p in self.progress_watcher.poll() if j in newest]

    def next_due(self) -> float | None:
        """When the report files are next looked at (None: no job is watched)."""
        return self._polled_at + REPORT_POLL_S if self.watcher.watched() else None

    def forget(self, job_id: str) -> None:
        self.watcher.forget(job_id)
        self.progress_watcher.forget(job_id)


def _newest(running: Iterable[TaskKey]) -> dict[str, TaskKey]:
    """Job -> the task of its newest run that reports for it (its first task)."""
    newest: dict[str, TaskKey] = {}
    for key in running:
        best = newest.get(key.job)
        if best is None or (key.run, -key.task) > (best.run, -best.task):
            newest[key.job] = key
    return newest
