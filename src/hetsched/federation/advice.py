"""What the members say about the jobs that wait: their own what-if, asked and told.

The federation's core sees a member as the sum of its nodes. Each member can say more: its
own what-if (``POST /v1/whatif``) answers, from its own core and profile, whether a job
would start there now, in how many seconds, or never, counting its local work and how its
nodes are fragmented. The loop asks every ready member now and then for the shapes of the
jobs that wait (:func:`questions`); the answers feed the ``member-start`` score and each
waiting job's explanation (:func:`said`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from hetsched.cluster.state import ClusterState
from hetsched.federation.explain import by_member
from hetsched.federation.plugins import Book, shape
from hetsched.framework.runtime import Framework
from hetsched.model.job import Job
from hetsched.scheduler.explain import Explanation

__all__ = ["MAX_QUESTIONS", "explained", "questions", "said"]

#: distinct job shapes asked about at once
MAX_QUESTIONS = 100


def questions(
    book: Book, submissions: Mapping[str, Mapping[str, Any]], waiting: Iterable[str]
) -> dict[str, Mapping[str, Any]]:
    """One submission per distinct shape among the ``waiting`` jobs (shape -> submission)."""
    out: dict[str, Mapping[str, Any]] = {}
    for job_id in waiting:
        job, submission = book.jobs.get(job_id), submissions.get(job_id)
        if job is None or submission is None:
            continue
        out.setdefault(shape(job), submission)
        if len(out) >= MAX_QUESTIONS:
            break
    return out


def said(book: Book, job: Job) -> list[str]:
    """What each member answered for the job's shape, by member."""
    key = shape(job)
    out = []
    for name in sorted(book.whatif):
        answer = book.whatif[name].get(key)
        if answer is not None:
            out.append(f"member {name} says: {answer.get('reason', '?')}")
    return out


def explained(
    framework: Framework,
    cluster: ClusterState,
    core_job: Job,
    explanation: Explanation,
    book: Book,
    now: float,
) -> Explanation:
    """A waiting job's explanation with one line per member (why it passed the job over)
    and what each member itself said."""
    job = book.jobs.get(core_job.id, core_job)
    return dataclasses.replace(
        explanation,
        rejections=tuple(by_member(framework, cluster, core_job, now)),
        reasons=(*explanation.reasons, *said(book, job)),
    )
