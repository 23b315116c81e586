"""A sequence built row by row reads like the list of its rows: indexing, slices, iteration,
equality (the base of the replay's column-backed workloads and outcome tables)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsched.sim.lazyrows import LazyRows


class Squares(LazyRows[int]):
    def __init__(self, size: int) -> None:
        self.size = size
        self.built = 0

    def __len__(self) -> int:
        return self.size

    def _row(self, i: int) -> int:
        self.built += 1
        return i * i


@pytest.mark.parametrize(
    ("size", "index", "expected"),
    [(3, 0, 0), (3, 2, 4), (3, -1, 4), (3, -3, 0), (1, 0, 0)],
)
def test_an_index_gives_its_row(size: int, index: int, expected: int) -> None:
    assert Squares(size)[index] == expected


@pytest.mark.parametrize(("size", "index"), [(3, 3), (3, -4), (0, 0), (0, -1)])
def test_an_index_past_either_end_is_an_index_error(size: int, index: int) -> None:
    with pytest.raises(IndexError):
        Squares(size)[index]


@given(
    st.integers(0, 12),
    st.integers(-15, 15) | st.none(),
    st.integers(-15, 15) | st.none(),
    st.sampled_from([None, 1, 2, -1, -3]),
)
def test_it_reads_as_the_list_of_its_rows(
    size: int, start: int | None, stop: int | None, step: int | None
) -> None:
    rows = Squares(size)
    listed = [i * i for i in range(size)]
    assert list(rows) == listed and rows == listed and rows == tuple(listed)
    assert rows[start:stop:step] == tuple(listed[start:stop:step])
    assert (rows == [*listed, 0]) is False
    assert rows.__eq__("text") is NotImplemented


def test_rows_are_built_when_read_and_it_is_unhashable() -> None:
    rows = Squares(1_000_000)
    assert rows[-1] == 999_999**2 and rows.built == 1
    with pytest.raises(TypeError):
        hash(rows)
