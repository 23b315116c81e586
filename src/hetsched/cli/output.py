"""Output helpers shared by the commands: tables with rich, JSON for scripts, one-line errors."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Any, NoReturn

import typer
from rich.console import Console

__all__ = ["OutputFormat", "console", "fail", "print_json"]

console = Console()
err_console = Console(stderr=True)


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def fail(message: str, code: int = 1) -> NoReturn:
    """Print an error (each line prefixed) to stderr and exit with ``code``."""
    for line in message.splitlines() or [""]:
        err_console.print(f"[red]error:[/red] {line}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(code)
