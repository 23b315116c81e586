"""The framework runtime: runs a profile's plugins, point by point, for one task."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel

from hetsched.cluster.assign import assign_devices
from hetsched.cluster.placement import Placement
from hetsched.framework.cycle import CycleContext
from hetsched.framework.interfaces import (
    BindPlugin,
    BoolArray,
    ChoosesDevices,
    FilterPlugin,
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
from hetsched.framework.registry import lookup
from hetsched.framework.status import Status

__all__ = ["Framework", "NodeRejections"]


@dataclass(frozen=True, slots=True)
class NodeRejections:
    """How many nodes one filter rejected for one reason."""

    plugin: str
    reason: str
    nodes: int

    def __str__(self) -> str:
        return f"{self.reason}: {self.nodes} node{'s' if self.nodes != 1 else ''}"


def _build(ref: PluginRef, handle: Any) -> Any:
    spec = lookup(ref.name)
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

    def __init__(self, spec: ProfileSpec, handle: Any = None, seed: int = 0) -> None:
        self.spec = spec
        self.queue_sort: QueueSortPlugin = _build(spec.queue_sort, handle)
        self.prefilters: list[PreFilterPlugin] = [_build(r, handle) for r in spec.prefilter]
        self.filters: list[FilterPlugin] = [_build(r, handle) for r in spec.filter]
        self.scorers: list[tuple[ScorePlugin, float]] = [
            (_build(r, handle), r.weight) for r in spec.score
        ]
        # protocol checks are slow; decide once which scorers normalise
        self._normalizes = [isinstance(p, NormalizesScores) for p, _ in self.scorers]
        self.reservers: list[ReservePlugin] = [_build(r, handle) for r in spec.reserve]
        self.permits: list[PermitPlugin] = [_build(r, handle) for r in spec.permit]
        self.post_filters: list[PostFilterPlugin] = [_build(r, handle) for r in spec.post_filter]
        self.binders: list[BindPlugin] = [_build(r, handle) for r in spec.bind]
        choosers = [p for p, _ in self.scorers if isinstance(p, ChoosesDevices)]
        self._chooser: ChoosesDevices | None = choosers[0] if choosers else None
        self._rng = np.random.default_rng(seed)
        self._rank: IntArray = np.zeros(0, np.int64)

    # -- queue ---------------------------------------------------------------------------

    def sort_key(self, job: object, now: float) -> tuple[Hashable, ...]:
        return self.queue_sort.sort_key(job, now)

    # -- one task ------------------------------------------------------------------------

    def prefilter(self, ctx: CycleContext) -> Status:
        for plugin in self.prefilters:
            status = plugin.prefilter(ctx)
            if not status.ok:
                return Status(status.code, status.reasons, status.plugin or plugin.name)
        return Status.success()

    def feasible(self, ctx: CycleContext, candidates: BoolArray | None = None) -> BoolArray:
        """Rows that pass every filter (a mask over all node rows)."""
        mask = ctx.state.active if candidates is None else candidates
        for plugin in self.filters:
            mask = plugin.filter(ctx, mask)
            if not mask.any():
                break
        return mask

    def scores(self, ctx: CycleContext, rows: IntArray) -> np.ndarray[Any, np.dtype[np.float64]]:
        total = np.zeros(len(rows), np.float64)
        for (plugin, weight), normalizes in zip(self.scorers, self._normalizes, strict=True):
            raw = plugin.score(ctx, rows)
            if normalizes:
                raw = plugin.normalize(ctx, raw)  # type: ignore[attr-defined]
            total += weight * raw
        return total

    def select(self, ctx: CycleContext, candidates: BoolArray | None = None) -> Placement | None:
        """Filter, score and choose devices for ``ctx.request``; None if no node fits.

        Does not allocate: the caller allocates (and so can roll back a gang).
        """
        mask = self.feasible(ctx, candidates)
        rows = np.flatnonzero(mask)
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

    def _placement(self, ctx: CycleContext, row: int) -> Placement | None:
        devices = None
        if self._chooser is not None:
            devices = self._chooser.choose_devices(ctx, row)
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
            passed = plugin.filter(ctx, mask)
            rejected = mask & ~passed
            if rejected.any():
                explained = np.zeros_like(rejected)
                for reason, rows in plugin.diagnose(ctx, rejected):
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
            status = plugin.reserve(ctx, placement)
            if not status.ok:
                for undo in reversed([*done, plugin]):
                    undo.unreserve(ctx, placement)
                return Status(status.code, status.reasons, status.plugin or plugin.name)
            done.append(plugin)
        return Status.success()

    def unreserve(self, ctx: CycleContext, placement: Placement) -> None:
        for plugin in reversed(self.reservers):
            plugin.unreserve(ctx, placement)

    def permit(self, ctx: CycleContext, placements: Sequence[Placement]) -> Status:
        for plugin in self.permits:
            status = plugin.permit(ctx, placements)
            if not status.ok:
                return Status(status.code, status.reasons, status.plugin or plugin.name)
        return Status.success()

    def post_filter(self, ctx: CycleContext, diagnosis: Sequence[Rejection]) -> Status:
        status = Status.unschedulable("no post-filter plugin enabled")
        for plugin in self.post_filters:
            status = plugin.post_filter(ctx, diagnosis)
            if status.ok:
                return status
        return status

    def bind(self, ctx: CycleContext, placements: Sequence[Placement]) -> Status:
        for plugin in self.binders:
            status = plugin.bind(ctx, placements)
            if not status.ok:
                return Status(status.code, status.reasons, status.plugin or plugin.name)
        return Status.success()
