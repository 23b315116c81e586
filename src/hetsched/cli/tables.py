"""Tables fitted to where they are printed.

On a terminal a table is drawn with rich, its columns fitted to the terminal's width: an id,
a state or a name is never cut; columns marked ``wrap`` (reasons, resources, device lists)
wrap between words; and when even that does not fit, the columns of least value are left
out (the caption names them). Anywhere else (a pipe, a file) rich would assume 80 columns
and cut; there the table is printed as plain columns separated by two spaces, as wide as its
longest cells, which scripts can cut and grep. ``-o json`` stays the format for programs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len

__all__ = ["Col", "Grid", "fit_columns", "plain_lines", "print_table"]

#: a rich table's width beyond its cells: one edge, then per column two spaces of padding
#: and one border
_EDGE = 1
_PER_COLUMN = 3


@dataclass(frozen=True)
class Col:
    """One column. ``keep``: never left out (ids, states, names). ``wrap``: may wrap
    between words, never inside one. Columns not kept are left out lowest ``drop`` first
    (ties: the rightmost first)."""

    name: str
    keep: bool = False
    wrap: bool = False
    drop: int = 0
    right: bool = False


@dataclass
class Grid:
    """A table's title, columns and rows (every cell a plain string, never markup)."""

    title: str
    columns: Sequence[Col]
    rows: list[list[str]] = field(default_factory=list)

    def add(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append([c.replace("\n", " ") for c in cells])


def _natural(grid: Grid, index: int) -> int:
    return max([cell_len(grid.columns[index].name), *(cell_len(r[index]) for r in grid.rows)])


def _smallest(grid: Grid, index: int) -> int:
    """The narrowest the column may be: its whole width, or for a wrapping column its
    longest word (a word is never cut)."""
    column = grid.columns[index]
    if not column.wrap:
        return _natural(grid, index)
    words = [w for r in grid.rows for w in r[index].split()] + column.name.split()
    return max([1, *(cell_len(w) for w in words)])


def fit_columns(grid: Grid, width: int) -> tuple[list[int], list[int]] | None:
    """The columns to show (indexes, in order) and each one's cell width so that the drawn
    table is at most ``width`` wide; None when even the kept columns cannot fit whole."""
    shown = list(range(len(grid.columns)))
    smallest = {i: _smallest(grid, i) for i in shown}
    natural = {i: _natural(grid, i) for i in shown}
    order = sorted(
        (i for i in shown if not grid.columns[i].keep),
        key=lambda i: (grid.columns[i].drop, -i),
    )

    def room() -> int:
        return width - _EDGE - _PER_COLUMN * len(shown)

    while sum(smallest[i] for i in shown) > room():
        if not order:
            return None
        shown.remove(order.pop(0))
    widths = {i: natural[i] for i in shown}
    excess = sum(widths.values()) - room()
    while excess > 0:
        # narrow the widest wrapping column that can still give room
        slack = [i for i in shown if widths[i] > smallest[i]]
        widest = max(slack, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    return shown, [widths[i] for i in shown]


def plain_lines(grid: Grid) -> list[str]:
    """The title, the header and the rows as plain full-width columns."""
    widths = [_natural(grid, i) for i in range(len(grid.columns))]

    def line(cells: Sequence[str]) -> str:
        padded = []
        for cell, width, column in zip(cells, widths, grid.columns, strict=True):
            pad = " " * (width - cell_len(cell))
            padded.append(pad + cell if column.right else cell + pad)
        return "  ".join(padded).rstrip()

    return [grid.title, line([c.name for c in grid.columns]), *(line(r) for r in grid.rows)]


def print_table(grid: Grid) -> None:
    """Print ``grid`` on standard output: fitted to the terminal, or plain off one."""
    from rich.table import Table
    from rich.text import Text

    from hetsched.cli import output

    console = output.console
    fitted = fit_columns(grid, console.width) if console.is_terminal else None
    if fitted is None:
        console.file.write("\n".join(plain_lines(grid)) + "\n")
        console.file.flush()
        return
    shown, widths = fitted
    left_out = [c.name for i, c in enumerate(grid.columns) if i not in shown]
    table = Table(
        title=grid.title,
        title_justify="left",
        caption=f"left out to fit {console.width} columns: {', '.join(left_out)}"
        if left_out
        else None,
        caption_justify="left",
    )
    for i, width in zip(shown, widths, strict=True):
        column = grid.columns[i]
        table.add_column(
            column.name,
            width=width,
            no_wrap=not column.wrap,
            overflow="fold",
            justify="right" if column.right else "left",
        )
    for row in grid.rows:
        table.add_row(*(Text(row[i]) for i in shown))
    console.print(table)
