"""``hetsched store backup | restore``: copies of ``hetsched up``'s store (docs/operations.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hetsched.cli.output import OutputFormat, console, fail, print_json

if TYPE_CHECKING:
    from hetsched.controlplane.storage.backup import Copied

__all__ = ["StoreDb", "StoreHome", "store_app"]

store_app = typer.Typer(
    help="Back up and restore the store of hetsched up (SQLite; PostgreSQL: pg_dump).",
    no_args_is_help=True,
)

#: the store's options, shared by the commands that read the store itself (history too)
StoreHome = Annotated[
    Path | None, typer.Option(help="The service's state directory (default: as hetsched up).")
]
StoreDb = Annotated[
    str | None,
    typer.Option(help="The store's URL, when hetsched up runs with --db (PostgreSQL)."),
]
_Output = Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")]


def _database(home: Path | None, db: str | None) -> tuple[Path, Path]:
    """The home and its SQLite file; a PostgreSQL URL ends the command with guidance."""
    from hetsched.controlplane import default_home

    home = home or default_home()
    if db is not None and not db.startswith("sqlite"):
        from sqlalchemy.engine import make_url

        from hetsched.controlplane.storage.backup import postgres_guidance
        from hetsched.controlplane.storage.health import where

        try:
            shown = where(make_url(db))
        except Exception:
            fail("--db: expected a store URL such as postgresql+psycopg://user@host/db", 2)
        fail(postgres_guidance(shown), 2)
    if db is not None:
        from sqlalchemy.engine import make_url

        return home, Path(make_url(db).database or "")
    return home, home / "hetsched.db"


def _show(copied: Copied, verb: str, output: OutputFormat) -> None:
    if output is OutputFormat.json:
        print_json(copied.to_dict())
        return
    console.print(
        f"{verb} {copied.source} to {copied.target}: {copied.bytes} bytes, "
        f"{copied.jobs} jobs, {copied.tokens} tokens",
        highlight=False,
    )
    for path in copied.kept:
        console.print(f"the store it replaced is kept as {path}", highlight=False)


@store_app.command("backup")
def backup(
    target: Annotated[Path, typer.Argument(help="The backup file to write (must not exist).")],
    home: StoreHome = None,
    db: StoreDb = None,
    output: _Output = OutputFormat.table,
) -> None:
    """Copy the store to TARGET while hetsched up runs (SQLite's online backup): one
    consistent moment, synced and checked before it takes its name."""
    from hetsched.controlplane.storage.backup import BackupError, backup_sqlite

    _home, database = _database(home, db)
    try:
        copied = backup_sqlite(database, target)
    except BackupError as exc:
        fail(str(exc))
    _show(copied, "backed up", output)


@store_app.command("restore")
def restore(
    source: Annotated[Path, typer.Argument(help="A backup written by `hetsched store backup`.")],
    home: StoreHome = None,
    db: StoreDb = None,
    output: _Output = OutputFormat.table,
) -> None:
    """Put a backup in place of the store, with hetsched up stopped. The store's files are
    moved aside, not deleted. Jobs submitted after the backup are not in it, and on the
    next start tasks the restored store does not know are stopped."""
    from hetsched.controlplane.storage.backup import BackupError, restore_sqlite

    home_path, database = _database(home, db)
    try:
        copied = restore_sqlite(source, database, home_path)
    except BackupError as exc:
        fail(str(exc))
    _show(copied, "restored", output)
