"""The federation's own plugins: members as nodes of its core.

- ``member-ready`` (filter): only members whose state is ``ready`` take new jobs; one that
  does not answer, or whose lease lapsed, keeps its jobs but gets no new one. The reason
  names the member and its state (``member b: unreachable``).
- ``member-fits`` (filter): a member takes a job only if one of its own nodes could hold
  each task (and its nodes together the whole gang) even empty: the federation's core sees
  a member as one big node, which a job could fit and no node of the member could run.
- ``member-speed`` (score): the job's rate on the fastest device model the member has free
  for it (``hetsched.model.speed``), relative to the job's fastest rate anywhere, 0..100;
  100 everywhere for a job that says nothing of speed.
- ``member-start`` (score): how soon the member itself says it could start the job (its own
  what-if, ``POST /v1/whatif``, asked by the driver for the jobs that wait): 100 now,
  less the longer it would wait (0 at ``horizon_s`` or never), 50 where it has not said.

``member-fits`` reads the members' inventories and the jobs as submitted from a
:class:`Book` the driver keeps; the classes are made for one book by
:func:`federation_plugins` (the core never opens a socket: the driver fills the book).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsched.cluster.state import ClusterState
from hetsched.controlplane import Feasibility, Unsatisfiable
from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import BoolArray, FloatArray, IntArray, Rejection
from hetsched.framework.registry import register, spec_of
from hetsched.model.device import Node
from hetsched.model.job import Job
from hetsched.model.speed import SpeedError, SpeedTable, resolve
from hetsched.plugins.labels import label_mask

__all__ = [
    "READY",
    "STATE_LABEL",
    "Book",
    "MemberStartArgs",
    "federation_plugins",
    "shape",
    "start_score",
]

#: a member node's state in the federation's core (a label)
STATE_LABEL = "hetsched.io/member-state"
READY = "ready"


@dataclass(slots=True)
class Book:
    """What the member plugins read, kept by the driver: each member node's inventory
    (its own nodes) and each job as submitted (the core holds it as one task)."""

    #: core node name -> the member's nodes, for the node that is in the core now
    inventories: dict[str, tuple[Node, ...]] = field(default_factory=dict)
    #: job id -> the job as submitted (replicas and gang as the member will see them)
    jobs: dict[str, Job] = field(default_factory=dict)
    #: the profile's throughput table (``speeds``), once the profile is read
    table: SpeedTable | None = None
    #: member -> job shape (:func:`shape`) -> the member's own what-if answer
    whatif: dict[str, dict[str, Mapping[str, object]]] = field(default_factory=dict)
    #: (member, request, replicas, gang) -> (the inventory it was judged on, the answer)
    _fits: dict[tuple[str, object], tuple[tuple[Node, ...], str | None]] = field(
        default_factory=dict
    )

    def member_problem(self, member: str, inventory: tuple[Node, ...], job: Job) -> str | None:
        """Why no node of the member could ever hold ``job`` (None: one could)."""
        key = (member, (job.resources, job.replicas, job.gang_min))
        known = self._fits.get(key)
        if known is None or known[0] is not inventory:
            if len(self._fits) > 100_000:
                self._fits.clear()
            # the node selector chose the member (its labels); the member never sees it
            local = dataclasses.replace(
                job, resources=dataclasses.replace(job.resources, node_selector={})
            )
            try:
                Feasibility(list(inventory)).check(local)
                answer = None
            except Unsatisfiable as exc:
                answer = str(exc)
            known = self._fits[key] = (inventory, answer)
        return known[1]


def shape(job: Job) -> str:
    """What a member's what-if answer depends on: the job's request, replicas and gang."""
    return repr((job.resources, job.replicas, job.gang_min))


def start_score(answer: Mapping[str, object] | None, horizon_s: float) -> float:
    """100 when the member can start it now, falling to 0 at ``horizon_s`` of waiting (or
    never); 50 without an answer."""
    if answer is None:
        return 50.0
    if answer.get("fits_now"):
        return 100.0
    wait = answer.get("start_in_s")
    if not isinstance(wait, int | float):
        return 0.0
    return 100.0 * max(0.0, 1.0 - float(wait) / horizon_s)


class MemberStartArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: the wait at which a member's answer scores 0
    horizon_s: float = Field(default=600.0, gt=0)


def _states(state: ClusterState) -> list[str]:
    return state.memo(
        "member-states", lambda: [n.labels.get(STATE_LABEL, READY) for n in state.nodes]
    )


@register("member-ready")
class MemberReady:
    """Only members that are ready take new jobs."""

    name = "member-ready"
    row_local = True

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        pass

    def filter(self, ctx: CycleContext, candidates: BoolArray) -> BoolArray:
        return candidates & label_mask(ctx.state, STATE_LABEL, READY)

    def filter_rows(self, ctx: CycleContext, rows: IntArray) -> BoolArray:
        return label_mask(ctx.state, STATE_LABEL, READY)[rows]

    def diagnose(self, ctx: CycleContext, candidates: BoolArray) -> list[Rejection]:
        out: list[Rejection] = []
        states = _states(ctx.state)
        for row in np.flatnonzero(candidates):
            if states[row] != READY:
                mask = np.zeros(len(ctx.state), np.bool_)
                mask[row] = True
                out.append((f"member {ctx.state.nodes[row].name}: {states[row]}", mask))
        return out


def _rates(state: ClusterState, rows: IntArray, job: Job, table: SpeedTable | None) -> FloatArray:
    """Per row: the job's best rate on a device model the member has free for it."""
    try:
        speeds = resolve(job, table)
    except SpeedError:
        return np.ones(len(rows))
    if speeds.uniform or not job.resources.devices:
        return np.ones(len(rows))
    usable = np.zeros(state.dev_free.shape, np.bool_)
    for device in job.resources.devices:
        for choice in device.choices:
            usable |= state.device_mask(choice.device_class, choice.selector)
    usable &= state.dev_free > 0
    out = np.zeros(len(rows))
    for index, row in enumerate(rows):
        kinds = {int(k) for k in state.dev_kind[row][usable[row]]}
        out[index] = max((speeds.on(state.kinds[k].model) for k in kinds), default=0.0)
    return out


class _Bound:
    """A plugin that reads the driver's :class:`Book`: :func:`federation_plugins` makes a
    subclass bound to one book (the class itself has none)."""

    book: ClassVar[Book] = Book()

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        pass


@register("member-fits")
class MemberFits(_Bound):
    """Some node of the member could hold each task of the job."""

    name = "member-fits"

    def _problems(self, ctx: CycleContext, rows: IntArray) -> Mapping[int, str]:
        book = self.book
        job = book.jobs.get(ctx.job.id, ctx.job)
        out: dict[int, str] = {}
        for row in rows:
            name = ctx.state.nodes[row].name
            inventory = book.inventories.get(name)
            if inventory is None:
                continue
            problem = book.member_problem(name, inventory, job)
            if problem is not None:
                out[int(row)] = problem
        return out

    def filter(self, ctx: CycleContext, candidates: BoolArray) -> BoolArray:
        mask = candidates.copy()
        for row in self._problems(ctx, np.flatnonzero(candidates)):
            mask[row] = False
        return mask

    def diagnose(self, ctx: CycleContext, candidates: BoolArray) -> list[Rejection]:
        out: list[Rejection] = []
        for row, problem in self._problems(ctx, np.flatnonzero(candidates)).items():
            mask = np.zeros(len(ctx.state), np.bool_)
            mask[row] = True
            out.append((f"member {ctx.state.nodes[row].name}: {problem}", mask))
        return out


@register("member-speed")
class MemberSpeed(_Bound):
    """The job's speed on the best device model the member has free, 0..100."""

    name = "member-speed"

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        table = self.book.table
        rates = _rates(ctx.state, rows, ctx.job, table)
        try:
            speeds = resolve(ctx.job, table)
            best = max([speeds.default, *speeds.rates.values()])
        except SpeedError:
            best = 0.0
        if best <= 0:
            return np.full(len(rows), 100.0)
        return np.asarray(100.0 * np.minimum(rates / best, 1.0), np.float64)


@register("member-start", args=MemberStartArgs)
class MemberStart(_Bound):
    """How soon the member itself says it could start the job."""

    name = "member-start"

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        assert isinstance(args, MemberStartArgs)
        self.horizon_s = args.horizon_s

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        book = self.book
        key = shape(book.jobs.get(ctx.job.id, ctx.job))
        names = [ctx.state.nodes[row].name for row in rows]
        return np.array(
            [start_score(book.whatif.get(n, {}).get(key), self.horizon_s) for n in names],
            np.float64,
        )


def federation_plugins(book: Book) -> list[type]:
    """The member plugin classes, those that read a book bound to ``book``."""

    def bound(cls: type[_Bound]) -> type:
        spec = spec_of(cls)
        sub = type(cls.__name__, (cls,), {"book": book, "__doc__": cls.__doc__})
        return register(spec.name, spec.args_model)(sub)

    return [MemberReady, bound(MemberFits), bound(MemberSpeed), bound(MemberStart)]
