"""The integrity check at start: a store that lost what it held is refused, never started
as a fresh install.

What the home shows of earlier use (:func:`home_used`): the marker this check leaves
(``store.marker``: which store the home used, and whether it was closed cleanly), the
admin token file, the jobs' folders. Against that, before anything is written:

- SQLite: the database file must exist and be more than empty, start with SQLite's header
  and be as long as its header says (not truncated); after an unclean stop (the marker
  says ``open``) its write-ahead log must still be there (the last commits live only in
  it until a checkpoint); ``PRAGMA quick_check`` must answer ``ok``;
- any store: its schema version must be one this hetsched knows, and a used home's store
  must hold hetsched's schema and at least one token.

A refusal is one line naming the file or server and the way out: restore a backup
(``hetsched store restore``), or start with ``--accept-empty-store`` to take the store as
it is (the admin token file is then kept and its token stored again, never replaced).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from hetsched.controlplane.storage.health import where
from hetsched.controlplane.storage.store import Store

__all__ = [
    "MARKER",
    "Marker",
    "StoreRefused",
    "check_contents",
    "check_sqlite_file",
    "home_used",
    "open_checked",
    "read_marker",
    "write_durably",
    "write_marker",
]

log = logging.getLogger(__name__)

#: the marker file in the home
MARKER = "store.marker"
_HEADER = b"SQLite format 3\x00"
_WAY_OUT = "restore a backup (hetsched store restore) or start with --accept-empty-store"


class StoreRefused(Exception):
    """The store failed the check at start; the message is the one line to show."""


@dataclass(frozen=True, slots=True)
class Marker:
    store: str
    state: str
    at: float


def write_durably(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``path`` whole or not at all, on the disk before this returns (a temporary
    file, synced, renamed over it, the folder synced)."""
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def read_marker(home: Path) -> Marker | None:
    try:
        data = json.loads((home / MARKER).read_text())
        return Marker(str(data["store"]), str(data["state"]), float(data["at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_marker(home: Path, store: str, state: str) -> None:
    """Record that the home uses ``store``, ``open`` (running) or ``closed`` (cleanly)."""
    text = json.dumps({"store": store, "state": state, "at": time.time()})
    write_durably(home / MARKER, text + "\n")


def home_used(home: Path) -> list[str]:
    """What in ``home`` shows earlier use (empty for a fresh home)."""
    found = [name for name in (MARKER, "admin.token") if (home / name).exists()]
    jobs = home / "jobs"
    if jobs.is_dir() and any(jobs.iterdir()):
        found.append("jobs/")
    return found


def check_sqlite_file(db: Path, used: list[str], marker: Marker | None) -> None:
    """The file checks of a SQLite store, before it is opened (opening creates what is
    missing); raises :class:`StoreRefused`."""
    shown = f"{', '.join(used)} show earlier use"
    size = db.stat().st_size if db.exists() else -1
    if size <= 0:
        if used:
            what = "missing" if size < 0 else "empty (0 bytes)"
            raise StoreRefused(f"store {db} is {what}, but {shown}: {_WAY_OUT}")
        return
    with open(db, "rb") as handle:
        header = handle.read(100)
    if len(header) < 100 or not header.startswith(_HEADER):
        raise StoreRefused(f"store {db} is not a SQLite database (truncated?): {_WAY_OUT}")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if pages and size < pages * page_size:
        raise StoreRefused(
            f"store {db} is truncated ({size} bytes, its header says {pages * page_size}): "
            f"{_WAY_OUT}"
        )
    wal = db.with_name(db.name + "-wal")
    if marker is not None and marker.state == "open" and not wal.exists():
        raise StoreRefused(
            f"store {db}: its write-ahead log {wal.name} is missing after an unclean stop "
            f"(the last commits were in it): {_WAY_OUT}"
        )
    _quick_check(db)


def _quick_check(db: Path) -> None:
    try:
        conn = sqlite3.connect(db, timeout=30)
        try:
            rows = conn.execute("PRAGMA quick_check(5)").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise StoreRefused(f"store {db} cannot be read ({exc}): {_WAY_OUT}") from None
    found = [" ".join(str(r[0]).split()) for r in rows]
    if found != ["ok"]:
        raise StoreRefused(f"store {db} is damaged ({'; '.join(found)[:200]}): {_WAY_OUT}")


def check_contents(
    where: str, revision: str | None, known: set[str], has_tokens: bool, used: list[str]
) -> None:
    """The checks of an opened store: its schema version, and that a used home's store
    is not empty; raises :class:`StoreRefused`."""
    if revision is not None and revision not in known:
        raise StoreRefused(
            f"store {where} has schema version {revision}, which this hetsched does not "
            "know (written by a newer version?): upgrade hetsched or restore a backup"
        )
    # the marker alone shows the schema was made, not that a token was (a stop in between)
    issued = [u for u in used if u != MARKER]
    if (used and revision is None) or (issued and not has_tokens):
        what = "no hetsched schema" if revision is None else "no tokens"
        raise StoreRefused(
            f"store {where} holds {what}, but {', '.join(used)} show earlier use: {_WAY_OUT}"
        )


def open_checked(home: Path, url: str, sync: str = "FULL", accept: bool = False) -> Store:
    """The home's store, checked (see the module docstring), migrated, and marked open in
    the home (closed again by :meth:`Store.close`). With ``accept`` a store that fails the
    checks is taken as it is (the operator said so: ``--accept-empty-store``); one whose
    schema is newer is never. Raises :class:`StoreRefused`."""
    used = home_used(home)
    marker = read_marker(home)
    name = where(make_url(url))
    if marker is not None and marker.store != name:
        used = [u for u in used if u != MARKER]  # the marker speaks of another store
        marker = None
    database = make_url(url).database
    if url.startswith("sqlite") and database and not accept:
        check_sqlite_file(Path(database), used, marker)
    store = Store(url, sync=sync)
    try:
        revision = store.schema_revision()
        tokens = revision is not None and store.has_tokens()
        known = store.known_revisions()
        check_contents(name, revision, known, tokens, [] if accept else used)
        store.migrate()
        write_marker(home, name, "open")
    except BaseException:
        store.close()
        raise
    store.on_close.append(lambda: _closed(home, name))
    return store


def _closed(home: Path, name: str) -> None:
    """Mark a clean stop; where the home cannot be written it stays ``open`` (the next
    start then checks that the write-ahead log is still there)."""
    try:
        write_marker(home, name, "closed")
    except OSError as exc:
        log.warning("could not mark the store closed in %s: %s", home, exc)
