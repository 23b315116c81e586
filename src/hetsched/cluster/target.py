"""A target workload learned from submissions: the shapes of recently submitted tasks.

FGD and fgdplus score placements against a target workload M (:mod:`hetsched.cluster.frag`).
The openb experiment takes M from a trace file; a running scheduler has no such file, but it
has its own history. :class:`ShapeHistory` keeps the shapes of the tasks submitted within a
sliding window and turns them into M with the study's rule: shapes ranked by how often they
were submitted, the most popular ones covering ``popularity`` of the submissions, weighted
by count (ties keep the order in which shapes were first submitted within the window).

A shape is what the fragmentation measure sees of a task: CPU, and for one device class the
device count, the share per device and the selector (its first request for that class, as
:func:`hetsched.plugins._resources.device_ask`). Memory is not part of it.

Pure: the driver passes each submission's time and the current time; nothing here reads a
clock. Times must not go backwards.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable

from hetsched.cluster.frag import TargetClass, TargetWorkload
from hetsched.model.job import TaskRequest

__all__ = ["Shape", "ShapeHistory", "shape_of", "workload_of"]

#: (cpu milli, device count, share per device, selector) of one task
Shape = tuple[int, int, int, str | None]


def shape_of(request: TaskRequest, device_class: str = "gpu") -> Shape:
    """The shape of ``request`` as the fragmentation measure sees it."""
    for device_request in request.devices:
        choice = device_request.primary
        if choice.device_class == device_class:
            return (request.cpu_milli, choice.count, choice.share, choice.selector)
    return (request.cpu_milli, 0, 0, None)


def workload_of(counts: Iterable[tuple[Shape, int]], popularity: float) -> TargetWorkload | None:
    """M from (shape, count) pairs in first-seen order: the most popular shapes covering
    ``popularity`` of the tasks, weighted by count; None without tasks."""
    items = [(shape, n) for shape, n in counts if n > 0]
    total = sum(n for _, n in items)
    if not total:
        return None
    ranked = sorted(items, key=lambda item: -item[1])  # stable: first seen first on ties
    kept: list[TargetClass] = []
    covered = 0
    for (cpu, count, share, selector), n in ranked:
        kept.append(TargetClass(cpu, count, share if count else 0, selector, float(n)))
        covered += n
        if covered >= popularity * total:
            break
    return TargetWorkload.of(kept)


class ShapeHistory:
    """Shapes of the tasks submitted in the last ``window_s`` seconds (None: all of them)."""

    def __init__(
        self, window_s: float | None, popularity: float = 0.95, device_class: str = "gpu"
    ) -> None:
        if window_s is not None and not window_s > 0:
            raise ValueError(f"window_s must be positive or None, got {window_s}")
        if not 0 < popularity <= 1:
            raise ValueError(f"popularity must be in (0, 1], got {popularity}")
        self.window_s = window_s
        self.popularity = popularity
        self.device_class = device_class
        self._events: deque[tuple[float, Shape, int]] = deque()
        #: tasks per shape in the window
        self._counts: Counter[Shape] = Counter()
        self._last = float("-inf")

    def __len__(self) -> int:
        """Tasks in the window (as of the last call)."""
        return sum(self._counts.values())

    def observe(self, request: TaskRequest, at: float, tasks: int = 1) -> None:
        """``tasks`` tasks of ``request``'s shape were submitted at time ``at``."""
        if tasks < 1:
            raise ValueError(f"tasks must be at least 1, got {tasks}")
        self._advance(at)
        shape = shape_of(request, self.device_class)
        self._events.append((at, shape, tasks))
        self._counts[shape] += tasks

    def target(self, now: float) -> TargetWorkload | None:
        """M as of ``now``; None when no task was submitted in the window."""
        self._advance(now)
        first_seen = dict.fromkeys(shape for _, shape, _ in self._events)
        return workload_of(((s, self._counts[s]) for s in first_seen), self.popularity)

    def _advance(self, now: float) -> None:
        if now < self._last:
            raise ValueError(f"time went backwards: {now} after {self._last}")
        self._last = now
        if self.window_s is None:
            return
        start = now - self.window_s
        while self._events and self._events[0][0] < start:
            _, shape, tasks = self._events.popleft()
            self._counts[shape] -= tasks
            if self._counts[shape] <= 0:
                del self._counts[shape]
