"""Values kept per cluster state by the placement path, without keeping the state alive."""

from __future__ import annotations

import weakref
from typing import Generic, TypeVar

from hetsched.cluster.state import ClusterState

__all__ = ["PerState"]

_V = TypeVar("_V")


class PerState(Generic[_V]):
    """A weak map from cluster states to values, read once or more per placement.

    The state read last is answered from a weak reference to it, without the weak map's
    lookup (which builds a weak reference at every call): placements run against one
    state at a time, forks aside.
    """

    __slots__ = ("_last", "_last_value", "_map")

    def __init__(self) -> None:
        self._map: weakref.WeakKeyDictionary[ClusterState, _V] = weakref.WeakKeyDictionary()
        self._last: weakref.ref[ClusterState] | None = None
        self._last_value: _V | None = None

    def get(self, state: ClusterState) -> _V | None:
        last = self._last
        if last is not None and last() is state:
            return self._last_value
        value = self._map.get(state)
        if value is not None:
            self._last, self._last_value = weakref.ref(state), value
        return value

    def set(self, state: ClusterState, value: _V) -> None:
        self._map[state] = value
        self._last, self._last_value = weakref.ref(state), value

    def pop(self, state: ClusterState) -> None:
        self._map.pop(state, None)
        if self._last is not None and self._last() is state:
            self._last, self._last_value = None, None
