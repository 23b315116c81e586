"""The framework runtime: runs a profile's plugins, point by point, for one task.

**Request classes.** Tasks with the same request (and the same best-effort flag) are
filtered and scored alike, so the runtime keeps, per cluster state, each class's feasible
rows and raw scores, and on the next placement of that class recomputes only the rows
allocated on or released from since (``ClusterState.changed_since``); a topology or health
change starts over. A thousand identical pending jobs then cost about one filter pass. The
cache is used only when every filter and scorer of the profile declares ``row_local``: a
row's verdict and raw score depend on the request, the job's best-effort flag, the cluster's
topology and that row's free capacity alone, computed element by element (so a row scores
the same bits whatever other rows are scored with it), and none normalizes (normalization
reads every feasible row).

**Plugin errors.** A plugin that raises never leaves an attempt half done: points that
return a Status give ``Status.error`` naming the plugin, the others raise
:class:`PluginError` (the core undoes the attempt and explains it with ``Code.ERROR``), and
a queue sort that raises gives a :class:`SortFailure` key, ordered after every other.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel

from hetsched.cluster.assign import assign_devices
from hetsched.cluster.perstate import PerState
from hetsched.cluster.placement import Placement
from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import QueuedJob, SchedulerHandle
from hetsched.framework.interfaces import (
    BindPlugin,
    BoolArray,
    ChoosesDevices,
    FilterPlugin,
    FloatArray,
    IntArray,
    NormalizesScores,
    PermitPlugin,
    PostFilterPlugin,
    PreFilterPlugin,
    QueueSortPlugin,
    Rejection,
    ReservePlugin,
    ScorePlugin,
)
from hetsched.framework.profile import PluginRef, ProfileSpec
from hetsched.framework.registry import Registry, installed
from hetsched.framework.status import PluginError, SortFailure, Status

__all__ = ["Framework", "NodeRejections", "SortFailure"]


@dataclass(frozen=True, slots=True)
class NodeRejections:
    """How many nodes one filter rejected for one reason."""

    plugin: str
    reason: str
    nodes: int

    def __str__(self) -> str:
        return f"{self.reason}: {self.nodes} node{'s' if self.nodes != 1 else ''}"


#: bytes of cached feasibility masks and raw scores per cluster state (least recently used
#: classes are dropped past it)
CLASS_CACHE_BYTES = 64 << 20
#: past this fraction of rows changed, a class is recomputed whole (cheaper than by rows)
_REFRESH_WHOLE = 0.1


@dataclass(slots=True, eq=False)
class _Class:
    """One request class on one cluster state, as of ``tick`` and ``version``."""

    tick: int
    version: int
    #: total score per row; -inf where the class does not fit
    total: FloatArray


def _build(ref: PluginRef, handle: SchedulerHandle | None, registry: Registry) -> Any:
    spec = registry.lookup(ref.name)
    args: BaseModel | None = None
    if spec.args_model is not None:
        args = spec.args_model.model_validate(ref.args)
    return spec.factory(args, handle)


class Framework:
    """Plugins of one profile, instantiated once, run for each placement attempt.

    ``seed`` drives the random tie-break (``tie_break: random``): among the nodes with the
    best score, the one with the lowest rank in a seeded permutation of rows wins. With
    ``tie_break: first`` the lowest row wins.
    """

    def __init__(
        self,
        spec: ProfileSpec,
        handle: SchedulerHandle | None = None,
        seed: int = 0,
        registry: Registry | None = None,
    ) -> None:
        self.spec = spec
        plugins = registry or installed()

        def build(ref: PluginRef) -> Any:
            return _build(ref, handle, plugins)

        self.queue_sort: QueueSortPlugin = build(spec.queue_sort)
        self.prefilters: list[PreFilterPlugin] = [build(r) for r in spec.prefilter]
        self.filters: list[FilterPlugin] = [build(r) for r in spec.filter]
        self.scorers: list[tuple[ScorePlugin, float]] = [(build(r), r.weight) for r in spec.score]
        # protocol checks are slow; decide once which scorers normalise
        self._normalizes = [isinstance(p, NormalizesScores) for p, _ in self.scorers]
        self.reservers: list[ReservePlugin] = [build(r) for r in spec.reserve]
        self.permits: list[PermitPlugin] = [build(r) for r in spec.permit]
        self.post_filters: list[PostFilterPlugin] = [build(r) for r in spec.post_filter]
        self.binders: list[BindPlugin] = [build(r) for r in spec.bind]
        self._plain = (
            len(self.scorers) == 1 and self.scorers[0][1] == 1.0 and not self._normalizes[0]
        )
        choosers = [p for p, _ in self.scorers if isinstance(p, ChoosesDevices)]
        self._chooser: ChoosesDevices | None = choosers[0] if choosers else None
        # made on the first random tie-break: numpy.random costs ~9 ms to import, and a
        # profile with ``tie_break: first`` never draws (the stream is the same either way)
        self._seed = seed
        self._rng: np.random.Generator | None = None
        #: job id -> why the queue sort failed for it (see :meth:`sort_key`)
        self.sort_failures: dict[str, Status] = {}
        self._rank: IntArray = np.zeros(0, np.int64)
        placers = [*self.filters, *(p for p, _ in self.scorers)]
        #: request classes can be cached (see the module docstring)
        self.classes_cached = not any(self._normalizes) and all(
            getattr(p, "row_local", False) for p in placers
        )
        self._classes: PerState[OrderedDict[tuple[Hashable, bool], _Class]] = PerState()

    # -- queue ---------------------------------------------------------------------------

    def sort_key(self, job: QueuedJob, now: float) -> tuple[Hashable, ...]:
        """The job's place in the queue order. A queue sort that raises puts the job last
        (a SortFailure key) and leaves its error in ``sort_failures`` until a later key
        for the job is read without one."""
        try:
            key = self.queue_sort.sort_key(job, now)
        except Exception as exc:
            status = PluginError.of(self.queue_sort.name, exc).status
            self.sort_failures[job.job.id] = status
            return (SortFailure(status),)
        if self.sort_failures:
            self.sort_failures.pop(job.job.id, None)
        return key

    # -- one task ------------------------------------------------------------------------

    def prefilter(self, ctx: CycleContext) -> Status:
        for plugin in self.prefilters:
            try:
                status = plugin.prefilter(ctx)
            except Exception as exc:
                return _failed(plugin.name, exc)
            if not status.ok:
                return Status(status.code, status.reasons, status.plugin or plugin.name)
        return Status.success()

    def feasible(self, ctx: CycleContext, candidates: BoolArray | None = None) -> BoolArray:
        """Rows that pass every filter (a mask over all node rows)."""
        mask = ctx.state.active if candidates is None else candidates
        for plugin in self.filters:
            try:
                mask = plugin.filter(ctx, mask)
            except Exception as exc:
                raise PluginError.of(plugin.name, exc) from exc
            if not mask.any():
                break
        return mask

    def scores(self, ctx: CycleContext, rows: IntArray) -> np.ndarray[Any, np.dtype[np.float64]]:
        if self._plain:
            # one scorer of weight 1: its scores are the total (0 + 1 * x is x)
            plugin = self.scorers[0][0]
            try:
                return np.asarray(plugin.score(ctx, rows), np.float64)
            except Exception as exc:
                raise PluginError.of(plugin.name, exc) from exc
        total = np.zeros(len(rows), np.float64)
        for (plugin, weight), normalizes in zip(self.scorers, self._normalizes, strict=True):
            try:
                raw = plugin.score(ctx, rows)
                if normalizes:
                    raw = plugin.normalize(ctx, raw)  # type: ignore[attr-defined]
            except Exception as exc:
                raise PluginError.of(plugin.name, exc) from exc
            # 1.0 x raw is raw, bit for bit: the product is skipped at the usual weight
            total += raw if weight == 1.0 else weight * raw
        return total

    def select(self, ctx: CycleContext, candidates: BoolArray | None = None) -> Placement | None:
        """Filter, score and choose devices for ``ctx.request``; None if no node fits.

        Does not allocate: the caller allocates (and so can roll back a gang).
        """
        if candidates is None and self.classes_cached:
            return self._select_classed(ctx)
        rows = self.feasible(ctx, candidates).nonzero()[0]
        if rows.size == 0:
            return None
        total = self.scores(ctx, rows)
        rank = self._ranks(len(ctx.state))
        while rows.size:
            best = np.flatnonzero(total >= total.max() - 1e-9)
            pick = int(best[np.argmin(rank[rows[best]])]) if rank.size else int(best[0])
            row = int(rows[pick])
            placement = self._placement(ctx, row)
            if placement is not None:
                return placement
            # the per-request counts fit but the exact joint choice did not: next node
            rows = np.delete(rows, pick)
            total = np.delete(total, pick)
        return None

    def select_within(self, ctx: CycleContext, rows: IntArray) -> Placement | None:
        """:meth:`select` among ``rows`` only (ascending; one network domain): the same
        choice as over a mask of them, from the request class's scores where cached."""
        if not self.classes_cached:
            candidates = np.zeros(len(ctx.state), np.bool_)
            candidates[rows] = True
            return self.select(ctx, candidates & ctx.state.active)
        total = self._classed(ctx)[rows]
        rank = self._ranks(len(ctx.state.nodes))
        while total.size:
            top = total.item(total.argmax())
            if top == -np.inf:
                break
            best = (total >= top - 1e-9).nonzero()[0]
            pick = int(best[np.argmin(rank[rows[best]])]) if rank.size else int(best[0])
            placement = self._placement(ctx, int(rows[pick]))
            if placement is not None:
                return placement
            total[pick] = -np.inf
        return None

    def _select_classed(self, ctx: CycleContext) -> Placement | None:
        """:meth:`select` from the request class's scores: the same choice, since a row's
        total is the same sum, and rows keep their order."""
        total = self._classed(ctx)
        rank = self._ranks(len(ctx.state.nodes))
        while total.size:
            # argmax finds the first maximum in one pass, several times faster than max
            first = int(total.argmax())
            top = total.item(first)
            if top == -np.inf:
                break
            if rank.size:
                best = (total >= top - 1e-9).nonzero()[0]
                row = int(best[np.argmin(rank[best])])
            else:
                row = _lowest_near(total, first, top - 1e-9)
            placement = self._placement(ctx, row)
            if placement is not None:
                return placement
            total = total.copy()
            total[row] = -np.inf
        return None

    def _classed(self, ctx: CycleContext) -> FloatArray:
        """Total score per row of the request's class (-inf where it does not fit), brought
        up to date by deciding again only the rows that changed since it was computed. A
        plugin error drops the class: it is computed afresh next time."""
        try:
            return self._class_totals(ctx)
        except PluginError:
            classes = self._classes.get(ctx.state)
            if classes is not None:
                classes.pop((ctx.request, ctx.job.best_effort), None)
            raise

    def _class_totals(self, ctx: CycleContext) -> FloatArray:
        state = ctx.state
        classes = self._classes.get(state)
        if classes is None:
            classes = OrderedDict()
            self._classes.set(state, classes)
        key = (ctx.request, ctx.job.best_effort)
        entry = classes.get(key)
        size = len(state.nodes)
        if entry is None or entry.version != state.version or entry.total.size != size:
            entry = classes[key] = _Class(state.tick, state.version, np.full(size, -np.inf))
            self._rescore(ctx, entry.total, self.feasible(ctx).nonzero()[0])
            budget = CLASS_CACHE_BYTES // max(1, 8 * size)
            while len(classes) > max(1, budget):
                classes.popitem(last=False)
            return entry.total
        classes.move_to_end(key)
        if entry.tick == state.tick:
            return entry.total
        changed = state.changed_since(entry.tick)
        if changed.size > _REFRESH_WHOLE * size:
            entry.total.fill(-np.inf)
            self._rescore(ctx, entry.total, self.feasible(ctx).nonzero()[0])
        elif changed.size:
            entry.total[changed] = -np.inf
            active = changed if state.all_active() else changed[state.active[changed]]
            self._rescore(ctx, entry.total, self._feasible_rows(ctx, active))
        entry.tick = state.tick
        return entry.total

    def _rescore(self, ctx: CycleContext, total: FloatArray, rows: IntArray) -> None:
        """Write the total scores of feasible ``rows`` (the arithmetic of :meth:`scores`,
        element by element, so the same bits)."""
        if rows.size:
            total[rows] = self.scores(ctx, rows)

    def _feasible_rows(self, ctx: CycleContext, rows: IntArray) -> IntArray:
        """The ``rows`` that pass every filter, row by row where a filter can
        (``filter_rows``, which answers None when every row passes), else through its
        mask."""
        for plugin in self.filters:
            if not rows.size:
                break
            by_rows = getattr(plugin, "filter_rows", None)
            try:
                if by_rows is not None:
                    verdict = by_rows(ctx, rows)
                    if verdict is not None:
                        rows = rows[verdict]
                else:
                    candidates = np.zeros(len(ctx.state), np.bool_)
                    candidates[rows] = True
                    rows = rows[plugin.filter(ctx, candidates)[rows]]
            except Exception as exc:
                raise PluginError.of(plugin.name, exc) from exc
        return rows

    def _placement(self, ctx: CycleContext, row: int) -> Placement | None:
        devices = None
        if self._chooser is not None:
            try:
                devices = self._chooser.choose_devices(ctx, row)
            except Exception as exc:
                raise PluginError.of(getattr(self._chooser, "name", "device choice"), exc) from exc
        if devices is None:
            devices = assign_devices(ctx.state, row, ctx.request, self.spec.device_choice)
        if devices is None:
            return None
        node = ctx.state.nodes[row]
        return Placement(node.name, ctx.request.cpu_milli, ctx.request.memory_mib, devices)

    def _ranks(self, rows: int) -> IntArray:
        if self.spec.tie_break == "first":
            return self._rank
        if self._rank.size < rows:
            if self._rng is None:
                self._rng = np.random.default_rng(self._seed)
            extra = self._rng.permutation(rows - self._rank.size) + self._rank.size
            self._rank = np.concatenate([self._rank, extra])
        return self._rank

    def diagnose(self, ctx: CycleContext) -> list[NodeRejections]:
        """Why no node fits: per filter, per reason, how many nodes it rejected.

        Filters run in profile order and each sees only the nodes the earlier ones passed,
        so every rejected node is counted once, under the first filter that rejected it.
        """
        out: list[NodeRejections] = []
        mask = ctx.state.active
        inactive = int((~mask).sum())
        if inactive:
            out.append(NodeRejections("cluster", "node not active", inactive))
        for plugin in self.filters:
            try:
                passed = plugin.filter(ctx, mask)
                rejected = mask & ~passed
                found = plugin.diagnose(ctx, rejected) if rejected.any() else []
            except Exception as exc:
                raise PluginError.of(plugin.name, exc) from exc
            if rejected.any():
                explained = np.zeros_like(rejected)
                for reason, rows in found:
                    count = int((rows & rejected & ~explained).sum())
                    explained |= rows
                    if count:
                        out.append(NodeRejections(plugin.name, reason, count))
                rest = int((rejected & ~explained).sum())
                if rest:
                    out.append(NodeRejections(plugin.name, "rejected", rest))
            mask = passed
        return out

    # -- after placement -----------------------------------------------------------------

    def reserve(self, ctx: CycleContext, placement: Placement) -> Status:
        done: list[ReservePlugin] = []
        for plugin in self.reservers:
            try:
                status = plugin.reserve(ctx, placement)
            except Exception as exc:
                status = _failed(plugin.name, exc)
            if not status.ok:
                self._unreserve(ctx, placement, [*done, plugin])
                return Status(status.code, status.reasons, status.plugin or plugin.name)
            done.append(plugin)
        return Status.success()

    def unreserve(self, ctx: CycleContext, placement: Placement) -> None:
        self._unreserve(ctx, placement, self.reservers)

    def _unreserve(
        self, ctx: CycleContext, placement: Placement, plugins: Sequence[ReservePlugin]
    ) -> None:
        """Undo every plugin's reserve, even when one raises (the first error is raised)."""
        error: PluginError | None = None
        for plugin in reversed(plugins):
            try:
                plugin.unreserve(ctx, placement)
            except Exception as exc:
                error = error or PluginError.of(plugin.name, exc)
        if error is not None:
            raise error

    def permit(self, ctx: CycleContext, placements: Sequence[Placement]) -> Status:
        for plugin in self.permits:
            try:
                status = plugin.permit(ctx, placements)
            except Exception as exc:
                status = _failed(plugin.name, exc)
            if not status.ok:
                return Status(status.code, status.reasons, status.plugin or plugin.name)
        return Status.success()

    def post_filter(self, ctx: CycleContext, diagnosis: Sequence[Rejection]) -> Status:
        status = Status.unschedulable("no post-filter plugin enabled")
        for plugin in self.post_filters:
            try:
                status = plugin.post_filter(ctx, diagnosis)
            except Exception as exc:
                status = _failed(plugin.name, exc)
            if status.ok:
                return status
        return status

    def bind(self, ctx: CycleContext, placements: Sequence[Placement]) -> Status:
        for plugin in self.binders:
            try:
                status = plugin.bind(ctx, placements)
            except Exception as exc:
                status = _failed(plugin.name, exc)
            if not status.ok:
                return Status(status.code, status.reasons, status.plugin or plugin.name)
        return Status.success()


def _lowest_near(total: FloatArray, first: int, cut: float) -> int:
    """The lowest row whose total is at least ``cut``, given ``first``, the first row of
    the maximum (at least ``cut``): only rows before it can be lower, and one of them is
    at least ``cut`` only if their maximum is."""
    if first == 0:
        return 0
    before = total[:first]
    if before.item(before.argmax()) < cut:
        return first
    return int((before >= cut).argmax())


def _failed(plugin: str, exc: Exception) -> Status:
    """The status of a point whose plugin raised: a PluginError from a nested framework
    call (a post-filter that places trials) keeps the plugin that failed first."""
    if isinstance(exc, PluginError):
        return exc.status
    return PluginError.of(plugin, exc).status
