"""Workflows: what a job waits for (``after``) and job arrays (``array``).

A dependency names another job and the end it waits for: ``succeeded`` (the default),
``failed`` or ``ended`` (any end). A dependency that can no longer be met (the job it
names ended otherwise) cancels the dependent, unless it says ``on_unmet: keep``.

An array is one job of N indexed elements in Slurm's syntax: ranges ``0-999``, steps
``1-7:2``, lists ``0,3,5`` and any mix of them, with ``%N`` capping how many elements run
at once. Its indexes are kept as ranges, never expanded: an element is created when it
may run (:func:`element_id` names it ``PARENT[INDEX]``).
"""

from __future__ import annotations

import bisect
import enum
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from hetsched.model.lifecycle import JobState

__all__ = [
    "MAX_ARRAY_INDEX",
    "MAX_ARRAY_SIZE",
    "ArraySpec",
    "Dependency",
    "Needs",
    "OnUnmet",
    "element_id",
    "find_cycle",
    "parse_array",
    "split_element",
]

#: the most elements one array may have, and the largest index (Slurm's ``MaxArraySize``)
MAX_ARRAY_SIZE = 1_000_000
MAX_ARRAY_INDEX = 9_999_999


class Needs(enum.StrEnum):
    """The end of the job named by a dependency that the dependent waits for."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    #: any end: succeeded, failed, cancelled or rejected
    ENDED = "ended"

    def met_by(self, state: JobState) -> bool:
        if self is Needs.ENDED:
            return True
        return state.value == self.value


class OnUnmet(enum.StrEnum):
    """What becomes of a job whose dependency can no longer be met."""

    #: it ends, cancelled, with the reason ("etl-2 failed")
    CANCEL = "cancel"
    #: it stays pending, and ``why`` says its dependency can never be met
    KEEP = "keep"


@dataclass(frozen=True, slots=True)
class Dependency:
    """Wait for job ``job`` (an id) to end as ``needs`` says."""

    job: str
    needs: Needs = Needs.SUCCEEDED

    def describe(self) -> str:
        return self.job if self.needs is Needs.SUCCEEDED else f"{self.job} ({self.needs})"


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """The indexes of an array as ascending, disjoint ranges ``(start, stop, step)`` (stop
    inclusive), and at most ``cap`` elements running at once (None: no cap)."""

    ranges: tuple[tuple[int, int, int], ...]
    cap: int | None = None
    #: elements before each range (computed): position -> index without expanding
    _before: tuple[int, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        before, total = [], 0
        for start, stop, step in self.ranges:
            before.append(total)
            total += (stop - start) // step + 1
        object.__setattr__(self, "_before", (*before, total))

    def __len__(self) -> int:
        return self._before[-1]

    def at(self, position: int) -> int:
        """The index at ``position`` (0-based, in ascending order)."""
        if not 0 <= position < len(self):
            raise IndexError(position)
        part = bisect.bisect_right(self._before, position) - 1
        start, _stop, step = self.ranges[part]
        return start + (position - self._before[part]) * step

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int):
            return False
        starts = [r[0] for r in self.ranges]
        part = bisect.bisect_right(starts, index) - 1
        if part < 0:
            return False
        start, stop, step = self.ranges[part]
        return index <= stop and (index - start) % step == 0

    def __iter__(self) -> Iterator[int]:
        for start, stop, step in self.ranges:
            yield from range(start, stop + 1, step)

    def describe(self) -> str:
        parts = []
        for start, stop, step in self.ranges:
            if start == stop:
                parts.append(str(start))
            else:
                parts.append(f"{start}-{stop}" + (f":{step}" if step != 1 else ""))
        return ",".join(parts) + (f"%{self.cap}" if self.cap is not None else "")


_PART = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def parse_array(text: str) -> ArraySpec:
    """``0-999%50``, ``1-7:2``, ``0,3,5``: ValueError saying what is wrong."""
    body, _, cap_text = str(text).strip().partition("%")
    cap: int | None = None
    if cap_text:
        if not cap_text.isdigit() or int(cap_text) < 1:
            raise ValueError(f"%N must be a whole number >= 1, got {cap_text!r}")
        cap = int(cap_text)
    ranges: list[tuple[int, int, int]] = []
    for part in body.split(","):
        match = _PART.match(part.strip())
        if match is None:
            raise ValueError(
                f"expected ranges (0-9), steps (1-7:2) or indexes (0,3,5), got {part!r}"
            )
        start = int(match.group(1))
        stop = int(match.group(2)) if match.group(2) is not None else start
        step = int(match.group(3)) if match.group(3) is not None else 1
        if stop < start or step < 1:
            raise ValueError(f"{part!r}: a range goes up, with a step >= 1")
        if stop > MAX_ARRAY_INDEX:
            raise ValueError(f"{part!r}: indexes go up to {MAX_ARRAY_INDEX}")
        stop -= (stop - start) % step  # the last index the range reaches
        if ranges and start <= ranges[-1][1]:
            raise ValueError(f"{part!r}: parts must go up without overlapping")
        ranges.append((start, stop, step))
    spec = ArraySpec(tuple(ranges), cap)
    if len(spec) > MAX_ARRAY_SIZE:
        raise ValueError(f"at most {MAX_ARRAY_SIZE} elements, got {len(spec)}")
    return spec


def element_id(parent: str, index: int) -> str:
    """The id of element ``index`` of array ``parent``."""
    return f"{parent}[{index}]"


def split_element(job_id: str) -> tuple[str, int] | None:
    """(array id, index) of an element id, None for any other id."""
    if not job_id.endswith("]"):
        return None
    parent, bracket, index = job_id[:-1].rpartition("[")
    if not bracket or not parent or not index.isdigit():
        return None
    return parent, int(index)


def find_cycle(edges: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle of ``edges`` (job -> the jobs it waits for) as ``[a, b, ..., a]``, or None.
    Iterative depth-first search, in the order of ``edges``."""
    colour: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in edges:
        if colour.get(root):
            continue
        path: list[str] = [root]
        stack: list[Iterator[str]] = [iter(edges.get(root, ()))]
        colour[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = 2
                stack.pop()
                continue
            state = colour.get(nxt)
            if state == 1:
                return [*path[path.index(nxt) :], nxt]
            if state is None and nxt in edges:
                colour[nxt] = 1
                path.append(nxt)
                stack.append(iter(edges[nxt]))
    return None
