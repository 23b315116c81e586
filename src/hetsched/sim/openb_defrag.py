"""Defragmentation in the openb experiment: when an arriving pod fits nowhere, move a few
placed pods so that it fits.

The experiment has no time and no departures, so a move is instantaneous (a checkpointed
pod resumes at once elsewhere). For each pod that the policy cannot place, the planner of
the core (:func:`hetsched.scheduler.defrag.plan_defrag`, with the same profile: moved pods
go where the policy would put them) looks for at most ``max_moves`` pods whose move lets it
fit, and never more than ``max_moved_fraction`` of the pods placed so far (at most 1 % of
the running pods per arrival by default). Every placed pod may move (every pod of the study
is taken to checkpoint).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.runtime import Framework
from hetsched.model.job import Job, TaskRequest
from hetsched.scheduler.defrag import Mover, MoverIndex, plan_defrag

__all__ = ["DefragOption", "OpenbDefrag"]


@dataclass(frozen=True, slots=True)
class DefragOption:
    """How much an arrival may move: at most ``max_moved_fraction`` of the placed pods and
    at most ``max_moves`` pods; ``max_nodes`` candidate nodes are tried per pod."""

    max_moved_fraction: float = 0.01
    max_moves: int = 4
    max_nodes: int = 16
    #: a moved pod that fits nowhere may move others in turn, this many levels down
    depth: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.max_moved_fraction <= 1:
            raise ValueError(f"max_moved_fraction must be in (0, 1], got {self.max_moved_fraction}")
        if self.max_moves < 1 or self.max_nodes < 1:
            raise ValueError("max_moves and max_nodes must be at least 1")


class OpenbDefrag:
    """The placed pods of one run and the moves made for arrivals that did not fit."""

    def __init__(self, state: ClusterState, framework: Framework, option: DefragOption) -> None:
        self.state = state
        self.framework = framework
        self.option = option
        self.movers = MoverIndex(state)
        #: pods moved, and arrivals placed only thanks to moves
        self.moved = 0
        self.rescued = 0
        #: request -> rows where it fits an empty node (every placed pod may move)
        self._fits_empty: dict[TaskRequest, np.ndarray] = {}
        self._empty = ClusterState(state.nodes)

    def placed(self, name: str, job: Job, placement: Placement) -> None:
        """A pod was placed (allocated under ``name``)."""
        self.movers.add(Mover(name, job, ((name, placement),)))

    def budget(self) -> int:
        return min(
            self.option.max_moves, math.floor(self.option.max_moved_fraction * len(self.movers))
        )

    def place(self, name: str, job: Job) -> Placement | None:
        """Make room for a pod that fits nowhere, moving placed pods; its placement (not
        allocated), or None when no allowed set of moves makes room."""
        budget = self.budget()
        if budget <= 0:
            return None
        plan = plan_defrag(
            self.state,
            self.framework,
            job,
            1,
            self.movers,
            budget,
            max_nodes=self.option.max_nodes,
            hold_old=False,
            candidates=self._candidates,
            in_place=True,
            depth=self.option.depth,
        )
        if plan is None:
            return None
        for mover, _ in plan.moves:
            self.state.release(mover.id)
        for mover, (placement,) in plan.moves:
            self.state.allocate(mover.id, placement)
            self.movers.remove(mover.id)
            self.movers.add(Mover(mover.id, mover.job, ((mover.id, placement),)))
        self.moved += len(plan.moves)
        self.rescued += 1
        return plan.placements[0]

    def _candidates(self, job: Job) -> np.ndarray:
        """Where a task of ``job`` fits an empty node (every placed pod may move)."""
        mask = self._fits_empty.get(job.resources)
        if mask is None:
            ctx = CycleContext(self._empty, job, job.resources, what_if=True)
            mask = self._fits_empty[job.resources] = self.framework.feasible(ctx).copy()
        return mask
