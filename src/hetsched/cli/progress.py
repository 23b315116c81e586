"""Progress of a long command, on standard error: a bar (or a spinner) with the elapsed
time when standard error is a terminal, nothing otherwise and nothing in JSON mode, so
standard output stays the result alone."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from hetsched.cli import output

__all__ = ["steps"]


@contextmanager
def steps(title: str, total: int | None, quiet: bool = False) -> Iterator[Callable[[str], None]]:
    """A progress display for ``total`` steps (None: a spinner, no count); yields the
    function to call as each step ends, with what it was."""
    console = output.err_console
    shown = not quiet and console.is_terminal
    columns = [SpinnerColumn(), TextColumn(f"[bold]{title}[/bold]")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    columns += [TimeElapsedColumn(), TextColumn("{task.description}")]
    with Progress(*columns, console=console, transient=True, disable=not shown) as progress:
        task = progress.add_task("", total=total)

        def advance(text: str) -> None:
            progress.update(task, advance=1, description=text)

        yield advance
