"""A restart never hides lost data: the check at start refuses a store that is empty,
truncated, damaged, missing its write-ahead log after an unclean stop, or of an unknown
schema, when the home shows earlier use; ``--accept-empty-store`` takes it as it is; the
admin token file is never overwritten."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from builders import cpu_node
from hetsched.agent import wrapper
from hetsched.agent.executor import Executor
from hetsched.cluster.state import ClusterState
from hetsched.controlplane.recovery import recover
from hetsched.controlplane.storage.integrity import (
    StoreRefused,
    home_used,
    open_checked,
    read_marker,
    write_marker,
)
from hetsched.drivers.executor import Exit
from hetsched.framework.profile import load_profile
from hetsched.scheduler import JobSubmitted, NodeAdded, Scheduler
from hetsched.service.server import Options, build
from hetsched.service.testing import ServerProcess

CLUSTER = """
nodes:
  - name: n1
    cpu: "8"
    memory: 16Gi
"""


def _url(home: Path) -> str:
    return f"sqlite:///{home / 'hetsched.db'}"


def _used_home(tmp_path: Path, jobs: int = 3) -> Path:
    """A home with a store holding an admin token and ``jobs`` jobs, cleanly closed."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    store = open_checked(home, _url(home))
    _id, token = store.create_token("admin", admin=True)
    (home / "admin.token").write_text(token + "\n")
    for i in range(jobs):
        store.insert_job(f"j{i}", "admin", "default", f"job{i}", 0, {}, None, None)
    store.close()
    return home


def test_a_fresh_home_starts_and_marks_its_store(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert home_used(home) == []
    store = open_checked(home, _url(home))
    marker = read_marker(home)
    assert marker is not None and marker.state == "open"
    assert marker.store == str(home / "hetsched.db")
    store.close()
    marker = read_marker(home)
    assert marker is not None and marker.state == "closed"
    # a clean stop leaves the home's store as it was: it opens again
    open_checked(home, _url(home)).close()


@pytest.mark.parametrize("damage", ["empty", "missing", "truncated", "garbage", "no tokens"])
def test_a_used_home_refuses_a_store_that_lost_its_data(tmp_path: Path, damage: str) -> None:
    home = _used_home(tmp_path, jobs=200)
    db = home / "hetsched.db"
    token = (home / "admin.token").read_bytes()
    if damage == "empty":
        db.write_bytes(b"")
    elif damage == "missing":
        db.unlink()
    elif damage == "truncated":
        whole = db.read_bytes()
        db.write_bytes(whole[: len(whole) // 2])
    elif damage == "garbage":
        data = bytearray(db.read_bytes())
        for at in range(8192, len(data) - 4096, 4096):
            data[at + 100 : at + 600] = b"\xa5" * 500  # the b-tree pages past the first
        db.write_bytes(bytes(data))
    else:
        conn = sqlite3.connect(db)
        with conn:
            conn.execute("DELETE FROM tokens")
        conn.close()
    with pytest.raises(StoreRefused) as refused:
        open_checked(home, _url(home)).close()
    message = str(refused.value)
    assert str(db) in message and "--accept-empty-store" in message
    assert "\n" not in message
    assert (home / "admin.token").read_bytes() == token


def test_a_lost_write_ahead_log_after_an_unclean_stop_is_refused(tmp_path: Path) -> None:
    home = _used_home(tmp_path)
    write_marker(home, str(home / "hetsched.db"), "open")  # as a kill -9 leaves it
    with pytest.raises(StoreRefused, match=r"hetsched\.db-wal is missing after an unclean stop"):
        open_checked(home, _url(home))


def test_an_unknown_schema_version_is_refused_even_when_accepted(tmp_path: Path) -> None:
    home = _used_home(tmp_path)
    conn = sqlite3.connect(home / "hetsched.db")
    with conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    conn.close()
    with pytest.raises(StoreRefused, match="schema version 9999"):
        open_checked(home, _url(home), accept=True)


def test_accepting_an_empty_store_keeps_the_admin_token(tmp_path: Path) -> None:
    home = _used_home(tmp_path)
    token = (home / "admin.token").read_text().strip()
    (home / "hetsched.db").write_bytes(b"")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    options = Options(home=home, cluster=[cluster], accept_empty_store=True)
    with pytest.raises(SystemExit, match="--accept-empty-store"):
        build(Options(home=home, cluster=[cluster]))
    built = build(options)
    try:
        assert built.admin_token is None  # the file's token, stored again
        assert (home / "admin.token").read_text().strip() == token
        principal = built.service.store.principal(token)
        assert principal is not None and principal.admin
        assert built.service.store.list_jobs(include_terminal=True) == []
    finally:
        built.service.loop.stop()
        assert built.service.executor is not None
        built.service.executor.shutdown()
        built.service.store.close()


def test_a_wal_deleted_after_kill_9_is_refused_at_start(tmp_path: Path) -> None:
    """The operator's case: ``hetsched up`` killed with acknowledged jobs in its WAL, the
    ``-wal`` deleted; the next start refuses with one line, the token untouched, and starts
    with ``--accept-empty-store``."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    home = tmp_path / "home"
    server = ServerProcess(home, ["--cluster", str(cluster)], tmp_path / "log")
    server.start()
    try:
        with server.client() as client:
            for i in range(20):
                body = {"name": f"j{i}", "command": ["sleep", "60"], "resources": {"cpu": "1"}}
                assert client.post("/v1/jobs", json=body).status_code == 201
        server.kill9()
        token = (home / "admin.token").read_bytes()
        (home / "hetsched.db-wal").unlink()
        entry = "from hetsched.cli.main import main; main()"
        argv = [sys.executable, "-c", entry, "up", "--home", str(home), "--cluster", str(cluster)]
        refused = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        lines = [x for x in refused.stderr.splitlines() if "hetsched.db" in x]
        assert len(lines) == 1 and "hetsched.db-wal is missing" in lines[0], refused.stderr
        assert "--accept-empty-store" in lines[0]
        assert (home / "admin.token").read_bytes() == token
        server.args.append("--accept-empty-store")
        server.start()
        answer = httpx.get(
            f"{server.url}/v1/jobs",
            headers={"Authorization": f"Bearer {token.decode().strip()}"},
            timeout=10,
        )
        assert answer.status_code == 200
    finally:
        server.stop()
        server.kill_tasks()
        time.sleep(0.1)


def test_a_run_the_store_lost_but_whose_exits_survived_is_not_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem that dropped the store's last acknowledged writes lost a run's record;
    its tasks' exit statuses survived in the journal. Recovery ends a job whose next run
    succeeded on every task, instead of running it again; one whose run failed is
    scheduled as usual (its restart policy decides)."""
    monkeypatch.setattr(wrapper, "EXIT_JOURNAL", tmp_path / "shm")
    (tmp_path / "shm").mkdir()
    home = tmp_path / "home"
    home.mkdir()
    store = open_checked(home, _url(home))
    body = {"name": "j", "command": ["true"], "resources": {"cpu": "1"}}
    for job_id in ("j1", "j2", "j3"):
        store.insert_job(job_id, "alice", "default", job_id, 0, body, None, None)
    executor = Executor(home, "inst")
    executor.keep_exits(
        [Exit.of("j1", 0, 1, 0, False, "exit code 0"), Exit.of("j2", 0, 1, 1, False, "exit 1")]
    )
    core = Scheduler(ClusterState(), load_profile(None))
    core.handle([NodeAdded(cpu_node("n1"))], now=0.0)
    try:
        found = recover(store, core, executor, now=100.0)
        submitted = [e.job.id for e in found.events if isinstance(e, JobSubmitted)]
        assert submitted == ["j2", "j3"]
        row = store.job("j1")
        assert row is not None and row["state"] == "succeeded"
        assert row["reason"].startswith("all tasks succeeded (run 1, whose record the store lost")
    finally:
        store.close()
