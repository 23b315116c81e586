"""Which rows changed since a moment: what caches of per-row values kept outside the cluster
state read to refresh only those rows.

Two logs, each with its own question:

- **Touches** (allocations and releases). ``tick`` counts them; ``row_tick`` holds the count
  at each row's last change, and a short log the rows of the latest changes in order, so a
  cache a few changes behind copies a few rows where the ticks would take a pass over all of
  them (:meth:`ChangeLog.changed_since`, :meth:`ChangeLog.recent_changes`).
- **Growth** (a release, a node or device added, a device healed, a node's labels changed):
  a row not listed since a mark has no more free capacity than it had then, so a task that
  fitted nowhere then can only fit now on a listed row (:meth:`ChangeLog.grown_since`).

Changes of topology and health bump the state's ``version`` instead: a cache keyed on both
(``version`` and ``tick``) refreshes rows on a touch and starts over on a version change.
:class:`~hetsched.cluster.state.ClusterState` keeps these logs as it changes; a fork starts
a log of its own (a mark from before the fork reads as "every row").
"""

from __future__ import annotations

from array import array

import numpy as np
import numpy.typing as npt

from hetsched.model.device import Node

__all__ = ["ChangeLog"]

IntArray = npt.NDArray[np.int64]

#: how many changes back ``changed_since`` reads the log rather than every row's tick (a
#: request class comes back a few hundred placements later; the log then answers with a
#: short copy, where the row ticks take a comparison and a nonzero over every row)
_TOUCH_LOG = 256


class ChangeLog:
    """The change logs of a cluster state (see the module docstring): a base of
    :class:`~hetsched.cluster.state.ClusterState`, whose rows they count."""

    nodes: list[Node]
    #: allocations and releases so far; ``row_tick[row]``: the count at the row's last one
    tick: int
    row_tick: IntArray
    _touch_log: array[int]
    _touch_base: int
    #: rows whose free capacity grew, in order, from position ``_grown_base`` of the log
    _grown: list[int]
    _grown_base: int

    def _start_log(self, tick: int, grown_base: int) -> None:
        """Empty logs that begin at ``tick`` and at growth position ``grown_base``."""
        self._touch_log = array("q")
        self._touch_base = tick
        self._grown = []
        self._grown_base = grown_base

    def _touched(self, row: int) -> None:
        self.tick += 1
        self.row_tick[row] = self.tick
        log = self._touch_log
        log.append(row)
        if len(log) >= 2 * _TOUCH_LOG:
            del log[:_TOUCH_LOG]
            self._touch_base += _TOUCH_LOG

    def changed_since(self, tick: int) -> IntArray:
        """Rows allocated on or released from since ``tick`` (a value of ``self.tick``).
        Changes of topology and health bump ``version`` instead.

        A few changes back, read from the log (a row may repeat); further back, from the
        rows' ticks (each row once, in row order)."""
        start = tick - self._touch_base
        if start >= 0 and self.tick - tick <= _TOUCH_LOG:
            return np.frombuffer(self._touch_log[start:], dtype=np.int64)
        return (self.row_tick > tick).nonzero()[0]

    def recent_changes(self, tick: int, limit: int) -> list[int] | None:
        """The rows of the changes since ``tick``, in order (a row may repeat), when they
        are at most ``limit`` and in the log; else None (ask :meth:`changed_since`)."""
        start = tick - self._touch_base
        if start < 0 or self.tick - tick > limit:
            return None
        return self._touch_log[start:].tolist()

    def growth_mark(self) -> int:
        """A position in the growth log, for ``grown_since``."""
        return self._grown_base + len(self._grown)

    def grown_since(self, mark: int) -> list[int]:
        """Rows whose free capacity may have grown since ``mark`` (with repeats). A row not
        listed has no more free capacity than it had then: a task that fitted nowhere then
        can only fit now on a listed row. A mark from before a fork counts as "everything"."""
        if mark < self._grown_base:
            return list(range(len(self.nodes)))
        return self._grown[mark - self._grown_base :]
