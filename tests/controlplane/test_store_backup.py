"""``hetsched store backup`` and ``restore``: an online copy of a running store, a restore
that refuses a running service and keeps what it replaces, and PostgreSQL's guidance."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hetsched.controlplane.storage.integrity import open_checked, read_marker
from hetsched.controlplane.storage.store import Store


def _hetsched(*args: str) -> subprocess.CompletedProcess[str]:
    entry = "from hetsched.cli.main import main; main()"
    return subprocess.run(
        [sys.executable, "-c", entry, *args], capture_output=True, text=True, timeout=120
    )


def _home(tmp_path: Path, jobs: int) -> tuple[Path, Store]:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    store = open_checked(home, f"sqlite:///{home / 'hetsched.db'}")
    store.create_token("admin", admin=True)
    for i in range(jobs):
        store.insert_job(f"j{i}", "admin", "default", f"job{i}", 0, {}, None, None)
    return home, store


def test_a_backup_of_a_running_store_restores_what_it_held(tmp_path: Path) -> None:
    home, store = _home(tmp_path, jobs=30)
    target = tmp_path / "backup.db"
    try:
        # taken while the store is open (its latest commits still in the WAL)
        made = _hetsched("store", "backup", str(target), "--home", str(home), "-o", "json")
        assert made.returncode == 0, made.stderr
        copied = json.loads(made.stdout)
        assert (copied["jobs"], copied["tokens"]) == (30, 1)
        again = _hetsched("store", "backup", str(target), "--home", str(home))
        assert again.returncode == 1 and "exists" in again.stderr
        # the store open: a restore is refused, nothing moved
        refused = _hetsched("store", "restore", str(target), "--home", str(home))
        assert refused.returncode == 1 and "stop hetsched up first" in refused.stderr
        for i in range(30, 40):  # after the backup: not in it
            store.insert_job(f"j{i}", "admin", "default", f"job{i}", 0, {}, None, None)
    finally:
        store.close()
    (home / "hetsched.db").write_bytes(b"")  # the store lost
    restored = _hetsched("store", "restore", str(target), "--home", str(home), "-o", "json")
    assert restored.returncode == 0, restored.stderr
    result = json.loads(restored.stdout)
    assert result["jobs"] == 30 and len(result["kept"]) == 1
    assert Path(result["kept"][0]).read_bytes() == b""  # kept aside, not deleted
    marker = read_marker(home)
    assert marker is not None and marker.state == "closed"
    reopened = open_checked(home, f"sqlite:///{home / 'hetsched.db'}")
    try:
        ids = {r["id"] for r in reopened.list_jobs(include_terminal=True)}
        assert ids == {f"j{i}" for i in range(30)}
    finally:
        reopened.close()


def test_a_damaged_backup_is_not_restored(tmp_path: Path) -> None:
    home, store = _home(tmp_path, jobs=1)
    store.close()
    before = (home / "hetsched.db").read_bytes()
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 50)
    answer = _hetsched("store", "restore", str(bad), "--home", str(home))
    assert answer.returncode == 1 and str(bad) in answer.stderr
    assert (home / "hetsched.db").read_bytes() == before


def test_a_postgres_store_gets_pg_dump_guidance(tmp_path: Path) -> None:
    url = "postgresql+psycopg://hs:secret@db.example:5433/hetsched"
    answer = _hetsched("store", "backup", str(tmp_path / "x"), "--db", url)
    assert answer.returncode == 2
    text = " ".join(answer.stderr.split())
    assert "pg_dump" in text and "postgresql at db.example:5433/hetsched" in text
    assert "secret" not in text
