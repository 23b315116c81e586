"""A plugin that raises: Code.ERROR where it failed, and the core's books as they were."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.cluster.placement import Placement
from hetsched.framework import (
    Code,
    CycleContext,
    QueuedJob,
    SchedulerHandle,
    Status,
    installed,
    parse_profile,
    register,
)
from hetsched.framework.interfaces import BoolArray, FloatArray, IntArray, Rejection
from hetsched.scheduler import Bind, JobSubmitted, Pending, Scheduler


class BoomArgs(BaseModel):
    #: the job it fails for, and how many of its calls for that job pass first
    job: str = "bad"
    after: int = 0


class _Boom:
    def __init__(self, args: BaseModel | None = None, handle: SchedulerHandle | None = None):
        assert isinstance(args, BoomArgs)
        self.args = args
        self.calls: Counter[str] = Counter()

    def _maybe(self, job_id: str) -> None:
        if job_id == self.args.job:
            self.calls[job_id] += 1
            if self.calls[job_id] > self.args.after:
                raise RuntimeError("boom")


@register("boom-filter", BoomArgs)
class BoomFilter(_Boom):
    def filter(self, ctx: CycleContext, candidates: BoolArray) -> BoolArray:
        self._maybe(ctx.job.id)
        return candidates

    def diagnose(self, ctx: CycleContext, candidates: BoolArray) -> list[Rejection]:
        return []


@register("boom-score", BoomArgs)
class BoomScore(_Boom):
    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        self._maybe(ctx.job.id)
        return np.zeros(len(rows))


@register("boom-prefilter", BoomArgs)
class BoomPrefilter(_Boom):
    def prefilter(self, ctx: CycleContext) -> Status:
        self._maybe(ctx.job.id)
        return Status.success()


@register("boom-reserve", BoomArgs)
class BoomReserve(_Boom):
    def reserve(self, ctx: CycleContext, placement: Placement) -> Status:
        self._maybe(ctx.job.id)
        return Status.success()

    def unreserve(self, ctx: CycleContext, placement: Placement) -> None:
        pass


@register("boom-permit", BoomArgs)
class BoomPermit(_Boom):
    def permit(self, ctx: CycleContext, placements: Sequence[Placement]) -> Status:
        self._maybe(ctx.job.id)
        return Status.success()


@register("boom-bind", BoomArgs)
class BoomBind(_Boom):
    def bind(self, ctx: CycleContext, placements: Sequence[Placement]) -> Status:
        self._maybe(ctx.job.id)
        return Status.success()


@register("boom-sort", BoomArgs)
class BoomSort(_Boom):
    def sort_key(self, job: QueuedJob, now: float) -> tuple[Hashable, ...]:
        self._maybe(job.job.id)
        return (job.seq,)


PLUGINS = installed().with_plugins(
    BoomFilter, BoomScore, BoomPrefilter, BoomReserve, BoomPermit, BoomBind, BoomSort
)


def _core(point: str, name: str, after: int = 0) -> Scheduler:
    ref: dict[str, Any] = {"name": name, "args": {"after": after}}
    doc: dict[str, Any] = {point: ref if point == "queue_sort" else [ref]}
    if point in ("filter", "prefilter"):
        doc[point] = [*{"filter": ["fit"], "prefilter": ["fit"]}[point], ref]
    profile = parse_profile(doc, registry=PLUGINS)
    return Scheduler(ClusterState([gpu_node("g", gpus=4)]), profile, registry=PLUGINS)


def _books(core: Scheduler) -> tuple[Any, ...]:
    state = core.state
    return (
        dict(state.allocations),
        state.cpu_free.tolist(),
        state.mem_free.tolist(),
        state.dev_free.tolist(),
        {k: dict(v) for k, v in core.ledger.by_job.items()},
        {i: (r.state, r.run, dict(r.placements), dict(r.held)) for i, r in core.jobs.items()},
        core.holder,
    )


@pytest.mark.parametrize(
    ("point", "name", "after"),
    [
        ("filter", "boom-filter", 0),
        ("filter", "boom-filter", 1),  # the second task, with the first allocated
        ("score", "boom-score", 1),
        ("prefilter", "boom-prefilter", 0),
        ("reserve", "boom-reserve", 1),
        ("permit", "boom-permit", 0),
        ("bind", "boom-bind", 0),
        ("queue_sort", "boom-sort", 0),
    ],
)
def test_a_raising_plugin_leaves_the_books_as_they_were(point: str, name: str, after: int) -> None:
    core = _core(point, name, after)
    core.handle([JobSubmitted(job("ok", gpus=1))], 0)
    before = _books(core)
    actions = core.handle([JobSubmitted(job("bad", gpus=1, replicas=2))], 1)
    assert not [a for a in actions if isinstance(a, Bind)]
    after_books = _books(core)
    assert after_books[:5] == before[:5]  # cluster and usage exactly as before the call
    assert {k: v for k, v in after_books[5].items() if k != "bad"} == before[5]
    assert after_books[5]["bad"][2:] == ({}, {})  # it holds nothing
    (pending,) = [a for a in actions if isinstance(a, Pending)]
    assert pending.explanation.code is Code.ERROR
    assert f"{name}: failed: RuntimeError: boom" in pending.explanation.summary
    # the rest of the cluster goes on: another job still starts
    later = core.handle([JobSubmitted(job("next", gpus=1))], 2)
    assert [a.job_id for a in later if isinstance(a, Bind)] == ["next"]


def test_a_raising_post_filter_is_a_reason_not_a_crash() -> None:
    @register("boom-post", BoomArgs)
    class BoomPost(_Boom):
        def post_filter(self, ctx: CycleContext, diagnosis: Sequence[Rejection]) -> Status:
            self._maybe(ctx.job.id)
            return Status.unschedulable("never")

    plugins = PLUGINS.with_plugins(BoomPost)
    profile = parse_profile({"post_filter": [{"name": "boom-post"}]}, registry=plugins)
    core = Scheduler(ClusterState([gpu_node("g", gpus=1)]), profile, registry=plugins)
    core.handle([JobSubmitted(job("ok", gpus=1))], 0)
    before = _books(core)
    actions = core.handle([JobSubmitted(job("bad", gpus=1))], 1)
    assert _books(core)[:5] == before[:5]
    (pending,) = [a for a in actions if isinstance(a, Pending)]
    assert "boom-post: failed: RuntimeError: boom" in pending.explanation.lines()
