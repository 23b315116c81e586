"""The pydantic models of topology in spec files: a job's ``topology:`` request and a
cluster file's ``topology: {levels: [...]}`` (see :mod:`hetsched.model.topology`)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field, model_validator

from hetsched.model.spec_common import Strict
from hetsched.model.topology import HOST, TopologyRequest

__all__ = ["TopologySpec", "TopologyTreeSpec", "levels_problem"]


class TopologySpec(Strict):
    """``topology: {required: LABEL}`` or ``{preferred: LABEL}`` in a job, optionally with
    ``slice_size: N`` and ``slice_required: LABEL2`` (tasks in groups of N, each group
    inside one domain of LABEL2)."""

    required: str | None = Field(default=None, min_length=1)
    preferred: str | None = Field(default=None, min_length=1)
    slice_size: int | None = Field(default=None, ge=1, le=100_000)
    slice_required: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_level(self) -> TopologySpec:
        if (self.required is None) == (self.preferred is None):
            raise ValueError("give exactly one of required and preferred (a level's label)")
        if (self.slice_size is None) != (self.slice_required is None):
            raise ValueError("slice_size and slice_required go together")
        return self

    def build(self) -> TopologyRequest:
        return TopologyRequest(self.required, self.preferred, self.slice_size, self.slice_required)


class TopologyTreeSpec(Strict):
    """``topology: {levels: [LABEL, ...]}`` in a cluster file, broadest level first."""

    levels: list[str] = Field(min_length=1, max_length=8)

    @model_validator(mode="after")
    def _distinct(self) -> TopologyTreeSpec:
        problem = levels_problem(self.levels)
        if problem is not None:
            raise ValueError(problem)
        return self


def levels_problem(levels: Sequence[str]) -> str | None:
    """What is wrong with a list of network levels (an empty label, one listed twice, the
    host), or None; shared by cluster files and the ``--topology-level`` options."""
    for index, label in enumerate(levels):
        if not label:
            return f"levels[{index}]: a level is a node label, got ''"
        if label in levels[:index]:
            return f"levels[{index}]: level {label!r} is listed twice"
        if label == HOST:
            return f"levels[{index}]: the host is the implicit last level"
    return None
