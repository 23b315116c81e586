"""Task keys: which task of which run of which job. Imports nothing of the package.

Every driver, store and the core name a task by a :class:`TaskKey`; its one string form is
``<job>/<task>#<run>`` (``j1/0#2``: task 0 of job ``j1``, in its second run) and
:meth:`TaskKey.parse` is its one parser. Job ids may contain ``/`` and ``#`` (Kubernetes
job ids do): the task and run are read from the right.

Runs count from 1, each time the job starts again; run 0 is "not started yet".
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["TaskKey"]


class TaskKey(NamedTuple):
    """Task ``task`` (0-based) of run ``run`` of job ``job``. A tuple, so it is cheap to
    hash and compare; equal to the plain tuple ``(job, task, run)``."""

    job: str
    task: int
    run: int

    def __str__(self) -> str:
        return f"{self.job}/{self.task}#{self.run}"

    @classmethod
    def parse(cls, text: str) -> TaskKey:
        """The key whose string form is ``text``; ValueError naming what is wrong."""
        job, slash, rest = text.rpartition("/")
        task, hash_, run = rest.partition("#")
        if not slash or not job:
            raise ValueError(f"task key {text!r}: expected <job>/<task>#<run>, found no job")
        if not hash_:
            raise ValueError(f"task key {text!r}: expected <job>/<task>#<run>, found no '#'")
        if not (task.isascii() and task.isdigit()):
            raise ValueError(f"task key {text!r}: task must be a whole number, got {task!r}")
        if not (run.isascii() and run.isdigit()):
            raise ValueError(f"task key {text!r}: run must be a whole number, got {run!r}")
        return cls(job, int(task), int(run))
