"""Tables fitted to where they are printed: on a terminal of any width no kept cell (id,
state, name) and no word of a wrapping cell is cut, and low-value columns go first; off a
terminal, plain full-width columns."""

from __future__ import annotations

import io
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from hetsched.cli import output
from hetsched.cli.tables import Col, Grid, fit_columns, plain_lines, print_table

ID = "j18e70c29f563abcd"


def _jobs_grid() -> Grid:
    grid = Grid(
        "Jobs (2)",
        (
            Col("id", keep=True),
            Col("name", keep=True),
            Col("user", drop=3),
            Col("prio", drop=1, right=True),
            Col("state", keep=True),
            Col("reason", wrap=True, drop=5),
        ),
    )
    grid.add(ID, "batch-embed", "alice", "0", "succeeded", "finished with exit code 0")
    grid.add("j18e70c29f563abce", "urgent-train", "bob", "10", "pending", "no node fits now")
    return grid


def _render(grid: Grid, width: int, terminal: bool = True) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=terminal, color_system=None)
    saved = output.__dict__.get("console")
    output.console = console
    try:
        print_table(grid)
    finally:
        if saved is None:
            del output.console
        else:
            output.console = saved
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("width", "shown"),
    [
        (200, ["id", "name", "user", "prio", "state", "reason"]),
        (80, ["id", "name", "user", "prio", "state", "reason"]),
        (72, ["id", "name", "user", "state", "reason"]),
        (64, ["id", "name", "state", "reason"]),
        (50, ["id", "name", "state"]),
    ],
)
def test_columns_of_least_value_are_left_out_first(width: int, shown: list[str]) -> None:
    grid = _jobs_grid()
    fitted = fit_columns(grid, width)
    assert fitted is not None
    assert [grid.columns[i].name for i in fitted[0]] == shown
    text = _render(grid, width)
    assert max(len(line) for line in text.splitlines()) <= width
    for name in ("j18e70c29f563abcd", "j18e70c29f563abce", "succeeded", "pending"):
        assert name in text, text
    left_out = [c.name for c in grid.columns if c.name not in shown]
    if left_out:
        assert f"left out to fit {width} columns: {', '.join(left_out)}" in text
    else:
        assert "left out" not in text


def test_kept_columns_that_cannot_fit_print_plain_rather_than_cut() -> None:
    grid = _jobs_grid()
    assert fit_columns(grid, 30) is None
    text = _render(grid, 30)
    assert text.splitlines() == plain_lines(grid)
    assert "…" not in text


def test_off_a_terminal_the_table_is_plain_and_full_width() -> None:
    grid = _jobs_grid()
    text = _render(grid, 80, terminal=False)
    lines = text.splitlines()
    assert lines[0] == "Jobs (2)"
    assert lines[1].split() == ["id", "name", "user", "prio", "state", "reason"]
    assert lines[2].split()[:5] == [ID, "batch-embed", "alice", "0", "succeeded"]
    assert lines[2].endswith("finished with exit code 0")
    assert max(len(line) for line in lines) > 80  # nothing cut to rich's default width


def test_cells_are_text_not_markup() -> None:
    grid = Grid("t", (Col("reason", keep=True),))
    grid.add('selector matched no device (device.attributes["model"] in [A100])')
    assert "in [A100])" in _render(grid, 120)


def test_a_row_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="2 cells for 1 columns"):
        Grid("t", (Col("a"),)).add("x", "y")


_WORD = st.text(string.ascii_lowercase + string.digits + "-/.", min_size=1, max_size=24)
_CELL = st.lists(_WORD, min_size=1, max_size=5).map(" ".join)


@st.composite
def _grids(draw: st.DrawFn) -> Grid:
    flags = draw(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=8))
    columns = [
        Col(f"c{i}", keep=keep, wrap=wrap, drop=draw(st.integers(0, 3)))
        for i, (keep, wrap) in enumerate(flags)
    ]
    grid = Grid("T", columns)
    for _ in range(draw(st.integers(0, 4))):
        grid.add(*(draw(_CELL) for _ in columns))
    return grid


@settings(max_examples=80, deadline=None)
@given(_grids(), st.integers(20, 160))
def test_no_kept_cell_and_no_word_is_ever_cut(grid: Grid, width: int) -> None:
    text = _render(grid, width)
    fitted = fit_columns(grid, width)
    if fitted is None:
        assert text.splitlines() == plain_lines(grid)
        return
    assert max(len(line) for line in text.splitlines()) <= width
    shown = fitted[0]
    assert all(i in shown for i, c in enumerate(grid.columns) if c.keep)
    for row in grid.rows:
        for i in shown:
            pieces = row[i].split() if grid.columns[i].wrap else [row[i]]
            assert all(piece in text for piece in pieces), (row[i], text)
