"""Backing up and restoring a SQLite store (``hetsched store backup`` and ``restore``).

A backup is SQLite's online backup (``sqlite3.Connection.backup``): a consistent copy of
the database as of one moment, taken while ``hetsched up`` runs and writes, written to a
temporary file, synced, checked (``quick_check``) and only then renamed to its name. A
restore checks the backup the same way, refuses while any process has the store open (the
service must be stopped), moves the store's files aside (never deletes them) and puts the
backup in their place, synced, with the home's marker saying the store was closed cleanly.

PostgreSQL stores are backed up with PostgreSQL's own tools (``pg_dump``, point-in-time
recovery): :func:`postgres_guidance` says how (docs/operations.md).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from hetsched.controlplane.storage.integrity import (
    StoreRefused,
    check_sqlite_file,
    write_marker,
)

__all__ = ["BackupError", "Copied", "backup_sqlite", "postgres_guidance", "restore_sqlite"]


class BackupError(Exception):
    """A backup or restore that cannot be done; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Copied:
    """What a backup or restore copied."""

    source: str
    target: str
    bytes: int
    jobs: int
    tokens: int
    #: where a restore moved the store's files it replaced
    kept: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "target": self.target,
            "bytes": self.bytes,
            "jobs": self.jobs,
            "tokens": self.tokens,
            "kept": list(self.kept),
        }


def _counts(db: Path) -> tuple[int, int]:
    conn = sqlite3.connect(db)
    try:
        jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        tokens = conn.execute("SELECT count(*) FROM tokens").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{db} holds no hetsched store ({exc})") from None
    finally:
        conn.close()
    return int(jobs), int(tokens)


def _checked(db: Path) -> tuple[int, int]:
    """``db`` as a store: readable, undamaged, with hetsched's tables."""
    try:
        check_sqlite_file(db, ["a backup"], None)
    except StoreRefused as exc:
        raise BackupError(str(exc).split(": restore a backup")[0]) from None
    return _counts(db)


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def backup_sqlite(db: Path, target: Path) -> Copied:
    """Copy the store ``db`` to ``target`` (which must not exist), online."""
    if not db.exists():
        raise BackupError(f"no store at {db}")
    if target.exists():
        raise BackupError(f"{target} exists: name a new file (a backup never overwrites)")
    temporary = target.with_name(f".{target.name}.partial")
    source = sqlite3.connect(db, timeout=30)
    try:
        copy = sqlite3.connect(temporary)
        try:
            source.backup(copy, pages=1024)
        finally:
            copy.close()
    except sqlite3.Error as exc:
        temporary.unlink(missing_ok=True)
        raise BackupError(f"backing up {db} failed: {exc}") from None
    finally:
        source.close()
    _sync(temporary)
    try:
        jobs, tokens = _checked(temporary)
    except BackupError:
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, target)
    _sync(target.parent)
    return Copied(str(db), str(target), target.stat().st_size, jobs, tokens)


def _holders(files: list[Path]) -> list[int]:
    """Pids of processes that have any of ``files`` open."""
    wanted = {str(f.resolve()) for f in files if f.exists()}
    found: list[int] = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if any(o.path in wanted for o in proc.open_files()):
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


def restore_sqlite(backup: Path, db: Path, home: Path) -> Copied:
    """Put ``backup`` in place of the store ``db`` of ``home`` (the service stopped)."""
    if not backup.exists():
        raise BackupError(f"no backup at {backup}")
    jobs, tokens = _checked(backup)
    files = [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    holders = _holders(files)
    if holders:
        pids = ", ".join(map(str, holders))
        raise BackupError(f"{db} is open in process {pids}: stop hetsched up first")
    stamp = time.strftime("%Y%m%dT%H%M%S")
    kept: list[str] = []
    for path in files:
        if path.exists():
            aside = path.with_name(f"{path.name}.before-restore-{stamp}")
            os.replace(path, aside)
            kept.append(str(aside))
    temporary = db.with_name(f".{db.name}.restoring")
    shutil.copyfile(backup, temporary)
    os.chmod(temporary, 0o600)
    _sync(temporary)
    os.replace(temporary, db)
    _sync(db.parent)
    write_marker(home, str(db), "closed")
    return Copied(str(backup), str(db), db.stat().st_size, jobs, tokens, tuple(kept))


def postgres_guidance(where: str) -> str:
    """How to back up and restore a PostgreSQL store (one paragraph)."""
    return (
        f"the store is {where}: back it up with PostgreSQL's tools, e.g. "
        "`pg_dump --format=custom --file=hetsched.dump DBNAME` (consistent while hetsched "
        "up runs), and restore into an empty database with `pg_restore --dbname=DBNAME "
        "hetsched.dump` with the service stopped; continuous archiving (point-in-time "
        "recovery) keeps more. See docs/operations.md"
    )
