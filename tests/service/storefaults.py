"""The store-fault soak: ``hetsched up`` (a real process) with jobs running and arriving
while its store fails, and the invariants checked once it is back.

A fault (``faultinject.py``) begins while tasks run and jobs wait; it lasts ``hold_s``
(long enough for running tasks to end inside it), then ends. Throughout, a client submits
a job every ~0.1 s, each with its own idempotency key, retrying a 503 after a pause, and
another polls ``/readyz``. Every job's command appends a line to a file of its own outside
the faulty filesystem, then sleeps: the lines count the times it really ran.

Checked afterwards (:class:`FaultReport`): every acknowledged job is in the store (none
lost), every job succeeded (none failed because of the store: every command exits 0, and
``max_restarts`` is 0, so a job the service wrongly failed stays failed), every command ran
exactly once (none started twice) and in one run, no answer was a 500, the fault was seen
(503 answers with ``Retry-After``, ``/readyz`` 503), the service's process is the same
(no restart), and ``back_s``: from the fault's end to the first task that started after it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from faultinject import Ballast, Ext4Home, PgFailover, PgServer, tmpfs

from hetsched.controlplane.storage.store import Store
from hetsched.service.testing import ServerProcess

__all__ = [
    "CLUSTER",
    "FaultReport",
    "disk_full",
    "postgres_failover",
    "postgres_restart",
    "read_only",
    "run_store_fault",
]

CLUSTER = """
nodes:
  - name: fault-node
    cpu: "4"
    memory: 16Gi
"""
TERMINAL = {"succeeded", "failed", "cancelled", "rejected"}


@dataclass
class FaultReport:
    acked: int = 0
    lost: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    ran_twice: dict[str, int] = field(default_factory=dict)
    not_run: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    retry_after: int = 0
    readyz: Counter[int] = field(default_factory=Counter)
    same_process: bool = True
    back_s: float | None = None
    alerts: list[str] = field(default_factory=list)
    #: ``GET /v1/alerts`` while the store failed: the status, the loop's alert kinds
    alerts_during: tuple[int, list[str]] = (0, [])

    def summary(self) -> str:
        back = "none" if self.back_s is None else f"{self.back_s:.2f}s"
        return (
            f"{self.acked} acknowledged, {len(self.lost)} lost, {len(self.failed)} failed, "
            f"{len(self.ran_twice)} ran twice, {len(self.not_run)} never ran; answers "
            f"{dict(self.statuses)} ({self.retry_after} with Retry-After); readyz "
            f"{dict(self.readyz)}; same process {self.same_process}; scheduling back {back}; "
            f"alerts during the fault {self.alerts_during}"
        )


def _body(i: int, marks: Path) -> dict[str, Any]:
    mark = marks / f"job-{i}"
    return {
        "name": f"fault-{i}",
        "command": ["sh", "-c", f"echo ran >> {mark}; sleep 1.5"],
        "resources": {"cpu": "1", "memory": "64Mi"},
        "max_restarts": 0,
    }


class _Traffic:
    """The submitting client and the readiness poller (threads)."""

    def __init__(self, server: ServerProcess, marks: Path, report: FaultReport) -> None:
        self.server = server
        self.marks = marks
        self.report = report
        self.acked: dict[str, str] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._submit_all, daemon=True),
            threading.Thread(target=self._poll_ready, daemon=True),
        ]
        self.next = 0

    def submit(self, i: int) -> None:
        """Submit job ``i`` until an answer acknowledges it (503s retried)."""
        headers = {"Authorization": f"Bearer {self.server.token}", "Idempotency-Key": f"k{i}"}
        while True:
            try:
                answer = httpx.post(
                    f"{self.server.url}/v1/jobs",
                    json=_body(i, self.marks),
                    headers=headers,
                    timeout=30,
                )
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            with self.lock:
                self.report.statuses[answer.status_code] += 1
                if answer.status_code == 503 and "retry-after" in answer.headers:
                    self.report.retry_after += 1
            if answer.status_code in (200, 201):
                with self.lock:
                    self.acked[f"k{i}"] = answer.json()["id"]
                return
            time.sleep(0.2)

    def _submit_all(self) -> None:
        while not self.stop.is_set():
            self.submit(self.next)
            self.next += 1
            time.sleep(0.1)

    def _poll_ready(self) -> None:
        while not self.stop.is_set():
            try:
                answer = httpx.get(f"{self.server.url}/readyz", timeout=10)
            except httpx.TransportError:
                continue
            with self.lock:
                self.report.readyz[answer.status_code] += 1
            time.sleep(0.2)

    def __enter__(self) -> _Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def _running(store: Store) -> int:
    return len(store.tasks_in(("running",)))


def _until(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def run_store_fault(
    server: ServerProcess,
    store_url: str,
    marks: Path,
    begin: Callable[[], object],
    end: Callable[[], None],
    hold_s: float = 6.0,
    settle_s: float = 90.0,
) -> FaultReport:
    """One fault under traffic (see the module docstring); ``server`` is started, its store
    at ``store_url``; ``begin`` and ``end`` make and undo the fault."""
    report = FaultReport()
    assert server.proc is not None
    pid = server.proc.pid
    reader = Store(store_url)
    try:
        with _Traffic(server, marks, report) as traffic:
            assert _until(lambda: _running(reader) >= 2 and traffic.next >= 6, 60), "no start"
            reader.engine.dispose()  # holds no file of the store while it fails
            begin()
            until = time.monotonic() + hold_s
            report.alerts_during = _alerts_during(server, until)
            time.sleep(max(0.0, until - time.monotonic()))
            end()
            back_at = time.time()
            time.sleep(2.0)
        report.same_process = server.proc.poll() is None and server.proc.pid == pid
        _settle(reader, traffic.acked, settle_s)
        _check(report, reader, traffic.acked, marks, back_at)
        report.alerts = _alerts(server)
    finally:
        reader.close()
    return report


def _settle(reader: Store, acked: dict[str, str], timeout_s: float) -> None:
    def done() -> bool:
        rows = reader.jobs_by_ids(sorted(acked.values()))
        return len(rows) == len(acked) and all(r["state"] in TERMINAL for r in rows)

    _until(done, timeout_s)


def _check(
    report: FaultReport, reader: Store, acked: dict[str, str], marks: Path, back_at: float
) -> None:
    report.acked = len(acked)
    rows = {r["id"]: r for r in reader.jobs_by_ids(sorted(acked.values()))}
    starts: list[float] = []
    for key, job_id in sorted(acked.items()):
        row = rows.get(job_id)
        if row is None:
            report.lost.append(job_id)
            continue
        if row["state"] != "succeeded":
            report.failed[job_id] = f"{row['state']}: {row['reason']}"
        mark = marks / f"job-{key[1:]}"
        ran = len(mark.read_text().splitlines()) if mark.exists() else 0
        tasks = reader.job_tasks(job_id)
        if ran == 0:
            report.not_run.append(job_id)
        elif ran > 1 or int(row["restarts"]) != 0:
            report.ran_twice[job_id] = ran
        starts += [float(t["started_at"]) for t in tasks if t["started_at"]]
    later = [s - back_at for s in starts if s >= back_at]
    report.back_s = min(later) if later else None


def _alerts_during(server: ServerProcess, until: float) -> tuple[int, list[str]]:
    """``GET /v1/alerts`` (a token the service checked before the fault) until it names
    the store's outage or ``until``: its last status and alert kinds."""
    status, kinds = 0, []
    with server.client() as client:
        while time.monotonic() < until:
            try:
                answer = client.get("/v1/alerts")
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            status = answer.status_code
            kinds = [a["kind"] for a in answer.json().get("loop", [])] if status == 200 else []
            if status != 200 or "store_unavailable" in kinds:
                break
            time.sleep(0.2)
    return status, kinds


def _alerts(server: ServerProcess) -> list[str]:
    with server.client() as client:
        answer = client.get("/v1/alerts")
    return [f"{a['kind']}: {a['message']}" for a in answer.json().get("loop", [])]


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    marks = tmp_path / "marks"
    marks.mkdir()
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    return marks, cluster


def disk_full(tmp_path: Path, hold_s: float = 6.0) -> tuple[FaultReport, ServerProcess]:
    """The SQLite home on a 48 MiB tmpfs that a ballast file fills for ``hold_s``."""
    marks, cluster = _setup(tmp_path)
    with tmpfs(tmp_path / "disk", "48m") as disk:
        home = disk / "home"
        server = ServerProcess(home, ["--cluster", str(cluster)], tmp_path / "log")
        ballast = Ballast(disk / "ballast")
        url = f"sqlite:///{home / 'hetsched.db'}"
        try:
            server.start()
            report = run_store_fault(server, url, marks, ballast.fill, ballast.free, hold_s)
        finally:
            ballast.free()
            server.stop()
            server.kill_tasks()
    return report, server


def postgres_restart(tmp_path: Path, hold_s: float = 6.0) -> tuple[FaultReport, ServerProcess]:
    """The store on a PostgreSQL server of its own, stopped ``-m immediate`` for
    ``hold_s`` and started again on the same port."""
    marks, cluster = _setup(tmp_path)
    with PgServer() as pg:
        args = ["--cluster", str(cluster), "--db", pg.url]
        server = ServerProcess(tmp_path / "home", args, tmp_path / "log")
        try:
            server.start()
            report = run_store_fault(server, pg.url, marks, pg.stop, pg.start, hold_s)
        finally:
            server.stop()
            server.kill_tasks()
    return report, server


def postgres_failover(tmp_path: Path, hold_s: float = 6.0) -> tuple[FaultReport, ServerProcess]:
    """The store on a PostgreSQL primary with a synchronous standby: the primary crashes,
    and after ``hold_s`` the standby is promoted behind the same address."""
    marks, cluster = _setup(tmp_path)
    with PgFailover() as pg:
        args = ["--cluster", str(cluster), "--db", pg.url]
        server = ServerProcess(tmp_path / "home", args, tmp_path / "log")
        try:
            server.start()
            report = run_store_fault(server, pg.url, marks, pg.fail, pg.take_over, hold_s)
        finally:
            server.stop()
            server.kill_tasks()
    return report, server


def read_only(tmp_path: Path, hold_s: float = 6.0) -> tuple[FaultReport, ServerProcess]:
    """The SQLite home on ext4 that the kernel turns read-only; after ``hold_s`` the
    operator's repair: stop the service, e2fsck, mount, start it again."""
    marks, cluster = _setup(tmp_path)
    with Ext4Home(tmp_path / "disk") as disk:
        home = disk.path / "home"
        server = ServerProcess(home, ["--cluster", str(cluster)], tmp_path / "log")

        def repair() -> None:
            server.stop()
            disk.repair()
            server.start()

        url = f"sqlite:///{home / 'hetsched.db'}"
        try:
            server.start()
            report = run_store_fault(server, url, marks, disk.fail, repair, hold_s)
        finally:
            server.stop()
            server.kill_tasks()
    return report, server
