"""The durability contract under kill -9, with real processes.

``hetsched up`` runs as a subprocess. Concurrent clients submit 200 jobs, each with its own
idempotency key, retrying until they get an answer (and retrying some answered ones on
purpose). Meanwhile the server is killed with SIGKILL at random moments, 20 times, and
restarted on the same home. Then:

- every job the API acknowledged is in the store, and no key produced two jobs;
- the allocation history never shows a device holding more than its capacity (two whole
  allocations, or shares summing above 1000, overlapping in time);
- every job ends in a terminal state, and nothing stays allocated.

The kill schedule comes from a seeded random source; the seed is printed on failure.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_fixtures import over_capacity

from hetsched.service.testing import free_port

pytestmark = pytest.mark.slow

CLUSTER = """
nodes:
  - name: crash-node
    cpu: "16"
    memory: 64Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 4}
"""

JOBS = 200
CLIENTS = 8
KILLS = 20
SEED = int(os.environ.get("HETSCHED_CRASH_SEED", "20261129"))
TERMINAL = {"succeeded", "failed", "cancelled", "rejected"}


def _body(i: int) -> dict[str, Any]:
    kind = i % 10
    resources: dict[str, Any] = {"cpu": "1", "memory": "256Mi"}
    if kind < 3:
        resources["devices"] = [{"class": "gpu", "count": 1}]
    elif kind == 3:
        resources["devices"] = [{"class": "gpu", "count": 1, "share": 500}]
    return {
        "name": f"crash-{i}",
        # a tenth run long enough to be running across kills, and so to be adopted
        "command": ["sleep", {4: "1.5"}.get(kind, "0.3" if kind < 4 else "0.1")],
        "resources": resources,
        "restart_policy": "on_failure",
        "max_restarts": 10,
    }


class Server:
    def __init__(self, home: Path, cluster: Path) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [
            sys.executable,
            "-c",
            "from hetsched.cli.main import main; main()",
            "up",
            "--home",
            str(home),
            "--port",
            str(self.port),
            "--cluster",
            str(cluster),
            "--node-name",
            "local",
            "--rate-limit",
            "0",
            "--kill-grace",
            "1",
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = open(home.parent / "server.log", "ab")  # noqa: SIM115 - closed in stop()

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"server exited: {self.proc.returncode}"
            try:
                if httpx.get(f"{self.url}/healthz", timeout=0.5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError("server did not become ready")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.log.close()


def _submitter(
    url: str,
    token: str,
    indices: list[int],
    acked: dict[str, str],
    lock: threading.Lock,
    rng: random.Random,
) -> None:
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=5
    ) as client:
        for i in indices:
            key = f"crash-key-{i}"
            repeats = 2 if rng.random() < 0.1 else 1  # some answered submits retried too
            for _ in range(repeats):
                while True:
                    try:
                        answer = client.post(
                            "/v1/jobs", json=_body(i), headers={"Idempotency-Key": key}
                        )
                    except httpx.TransportError:
                        time.sleep(0.05)
                        continue
                    if answer.status_code >= 500:
                        time.sleep(0.05)
                        continue
                    assert answer.status_code in (200, 201), answer.text
                    job_id = answer.json()["id"]
                    with lock:
                        assert acked.setdefault(key, job_id) == job_id, "a retry made a new job"
                    break
            time.sleep(rng.uniform(0.0, 0.05))


def test_kill_9_never_loses_duplicates_or_double_allocates(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    home = tmp_path / "home"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    server = Server(home, cluster)
    server.start()
    token = (home / "admin.token").read_text().strip()
    acked: dict[str, str] = {}
    lock = threading.Lock()
    indices = list(range(JOBS))
    threads = [
        threading.Thread(
            target=_submitter,
            args=(server.url, token, indices[c::CLIENTS], acked, lock, random.Random(SEED + c)),
        )
        for c in range(CLIENTS)
    ]
    for t in threads:
        t.start()
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.1, 0.8))
            server.kill9()
            server.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), f"submitters stuck (seed {SEED})"
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=10
        ) as client:
            deadline = time.monotonic() + 120
            while True:
                jobs = client.get("/v1/jobs", params={"all": True}).json()
                if all(j["state"] in TERMINAL for j in jobs) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
    finally:
        for t in threads:
            t.join(timeout=1)
        server.stop()

    db = sqlite3.connect(home / "hetsched.db")
    db.row_factory = sqlite3.Row
    rows = db.execute("SELECT id, request_key, state FROM jobs").fetchall()
    by_key: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        by_key[row["request_key"]].append(row["id"])
    # no accepted job lost, and no duplicate from retried submits
    assert len(acked) == JOBS, f"seed {SEED}"
    assert {k: [v] for k, v in acked.items()} == dict(by_key), f"seed {SEED}"
    # every job ends in a terminal state
    unfinished = [dict(r) for r in rows if r["state"] not in TERMINAL]
    assert unfinished == [], f"seed {SEED}"
    # no device slot ever held by two tasks
    history = db.execute("SELECT * FROM allocations").fetchall()
    assert history, "the workload allocated devices"
    assert over_capacity(history) == [], f"seed {SEED}"
    assert [dict(r) for r in history if r["live"]] == [], f"seed {SEED}"
    tasks = db.execute("SELECT state, count(*) AS n FROM tasks GROUP BY state").fetchall()
    states = db.execute("SELECT state, count(*) AS n FROM jobs GROUP BY state").fetchall()
    print(
        f"\ncrash test (seed {SEED}): {KILLS} kills, {len(acked)} jobs acknowledged, "
        f"jobs {dict((r['state'], r['n']) for r in states)}, "
        f"tasks {dict((r['state'], r['n']) for r in tasks)}, {len(history)} allocations"
    )
    db.close()


@pytest.mark.parametrize(
    ("rows", "problems"),
    [
        ([("d", 500, 0, 10), ("d", 500, 5, None)], 0),
        ([("d", 1000, 0, 10), ("d", 1000, 10, 20)], 0),  # released as the next is allocated
        ([("d", 1000, 0, 10), ("d", 1000, 9, 20)], 1),
        ([("d", 1000, 0, None), ("e", 1000, 0, None), ("d", 100, 50, 60)], 1),
    ],
)
def test_the_capacity_check_finds_a_device_held_twice(
    rows: list[tuple[str, int, float, float | None]], problems: int
) -> None:
    history = [
        {"device_id": d, "share": s, "allocated_at": a, "released_at": r} for d, s, a, r in rows
    ]
    assert len(over_capacity(history)) == problems
