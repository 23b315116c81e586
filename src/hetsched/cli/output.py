"""Output helpers shared by the commands: tables with rich, JSON for scripts, one-line errors."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from hetsched.cli.json_text import dumps_indented

if TYPE_CHECKING:
    from rich.console import Console

    console: Console
    err_console: Console

__all__ = ["INVALID_INPUT", "OutputFormat", "console", "err_console", "fail", "print_json"]

#: the exit code of a command refused for its input (a file or option that does not
#: validate, a job the service refuses as invalid): ``check``, ``place`` and ``submit`` alike,
#: and click's own for a usage error; 1 is for everything else (no service, a refused token)
INVALID_INPUT = 2


def __getattr__(name: str) -> Any:
    """``console`` (stdout) and ``err_console`` (stderr), rich consoles made on first use:
    importing rich is a noticeable part of a short command's start, and a command that
    prints JSON never needs it."""
    if name not in ("console", "err_console"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.console import Console

    made = globals()[name] = Console(stderr=name == "err_console")
    return made


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


def print_json(data: Any) -> None:
    sys.stdout.write(dumps_indented(data) + "\n")


def fail(message: str, code: int = 1) -> NoReturn:
    """Print an error (each line prefixed) to stderr and exit with ``code``."""
    errors = __getattr__("err_console")
    for line in message.splitlines() or [""]:
        errors.print(f"[red]error:[/red] {line}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(code)
