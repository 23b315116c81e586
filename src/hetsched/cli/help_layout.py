"""``--help`` never cuts an option's or a command's name.

Typer lays out an options panel as a rich table of columns (required mark, option names,
short names, ``--no-…`` names, type, help) whose widths rich shrinks, the widest first,
when the terminal is narrower than the table wants. With a long help word (a default such
as ``1:0.7,2:0.1,4:0.15,8:0.05``) the help column shrinks only down to the width of the
name columns, after which rich cuts every column alike: at 80 columns ``--max-gpus-per-
task`` showed as ``--max-gpus-per-ta…``. Marking every column but the last (the help)
``no_wrap`` makes rich take the width from the help alone, which wraps; names stay whole.
An option's help (typer's ``Columns`` of its text and its default) is given as one
paragraph whose words fold when wider than the column, rather than being cut.

A flag takes no value, so its type column stays empty: typer writes ``<bool>`` there, which
reads as if ``--demo`` wanted ``--demo true``.

:func:`install` makes typer's help rendering do that: its tables are built from a subclass
that sets the mark, put in place the first time a help is formatted (typer's rich module,
and rich, are not imported by a command that prints no help).
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand, TyperGroup, TyperOption

__all__ = ["install"]


def install() -> None:
    """Wrap typer's command and group ``format_help`` (once) so that each help is laid out
    with whole names, and flags are shown without a type."""
    _flags_without_a_type()
    for cls in (TyperCommand, TyperGroup):
        original = cls.format_help
        if getattr(original, "_whole_names", False):
            continue

        def format_help(self: Any, ctx: Any, formatter: Any, _original: Any = original) -> None:
            _use_whole_name_tables()
            _original(self, ctx, formatter)

        format_help._whole_names = True  # type: ignore[attr-defined]
        cls.format_help = format_help  # type: ignore[method-assign]


def _flags_without_a_type() -> None:
    original = TyperOption.display_type_rich
    if getattr(original, "_flags_bare", False):
        return

    def display_type_rich(self: Any, ctx: Any, _original: Any = original) -> str | None:
        if self.is_flag and not self.metavar:
            return None  # a flag (``--demo``, ``--dry-run``, ``--help``) takes no value
        result: str | None = _original(self, ctx)
        return result

    display_type_rich._flags_bare = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


def _use_whole_name_tables() -> None:
    from rich.columns import Columns
    from rich.table import Table
    from typer import rich_utils

    if getattr(rich_utils, "Table", None) is not Table:
        return  # already ours, or a typer that builds its tables otherwise: left alone

    class WholeNameTable(Table):
        """A help table whose columns other than the last (the help) are never cut."""

        def add_row(self, *renderables: Any, **options: Any) -> None:
            cells = list(renderables)
            if cells and isinstance(cells[-1], Columns):
                cells[-1] = _paragraph(cells[-1])
            super().add_row(*cells, **options)
            for column in self.columns[:-1]:
                column.no_wrap = True

    setattr(rich_utils, "Table", WholeNameTable)  # noqa: B010 (not an exported name)


def _paragraph(cell: Any) -> Any:
    """An option's help as typer gives it (a rich ``Columns`` of its text, default, and
    so on) as one paragraph whose words too wide for the column fold instead of being
    cut; left as it is when a part is not plain text (Markdown)."""
    from rich.text import Text

    parts = cell.renderables
    if not parts or not all(isinstance(part, Text) for part in parts):
        return cell
    text = Text(" ").join(parts)
    text.overflow = "fold"
    return text
