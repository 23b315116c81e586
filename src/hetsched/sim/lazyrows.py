"""Read-only sequences of records kept in columns, each record built when it is read.

A replay of a million jobs holds its workload and its outcomes as columns, not as a million
objects (:class:`~hetsched.sim.synthetic.SyntheticJobs`,
:class:`~hetsched.sim.outcomes.OutcomeTable`); code that reads them one by one still sees
a sequence of records.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import TypeVar, overload

__all__ = ["LazyRows"]

T = TypeVar("T")


class LazyRows(Sequence[T]):
    """A subclass gives ``__len__`` and :meth:`_row` and gets the rest of a read-only
    sequence: indexing (negative from the end, IndexError past it; a slice gives a tuple),
    iteration, and equality with any sequence of equal records, so a table compares equal
    to the list it stands for. Unhashable, as a list is."""

    @abstractmethod
    def _row(self, i: int) -> T:
        """The record of row ``i``, 0 <= i < len(self)."""

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...

    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if isinstance(index, slice):
            return tuple(self._row(i) for i in range(*index.indices(len(self))))
        return self._row(range(len(self))[index])  # IndexError past the end

    def __iter__(self) -> Iterator[T]:
        for i in range(len(self)):
            yield self._row(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]
