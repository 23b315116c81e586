"""Failover of a standby pair: the leader SIGKILLed with jobs in flight.

Two ``hetsched up --lease cp`` share one PostgreSQL and one home (the machine's own
PostgreSQL, started throwaway unless ``--db`` is given). The leader takes ``--jobs`` jobs
(each notes its start in a file, sleeps 3-8 s, notes its end), and is killed with SIGKILL
once half of them have started. Measured from the kill: **takeover**, until the standby's
``/healthz`` says it leads; **first submission**, until a submission to it is answered
201. Then every job must end: **lost** counts jobs not succeeded, **twice** the tasks that
noted more than one start.

    .venv/bin/python bench/standby_failover.py [--jobs 100] [--trials 3] [--lease-s 8]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from hetsched.service.testing import ServerProcess, free_port

TASK = (
    'echo "$HETSCHED_JOB_ID" >> "$MARKS/start"; sleep "$SECONDS_"; '
    'echo "$HETSCHED_JOB_ID" >> "$MARKS/end"'
)


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[str]:
    """A PostgreSQL cluster of the machine's binaries, removed afterwards."""
    bindir = Path(shutil.which("initdb") or "/usr/lib/postgresql/15/bin/initdb").parent
    data = Path(tempfile.mkdtemp(prefix="hetsched-bench-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(data, "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    initdb = [str(bindir / "initdb"), "-D", str(data / "db"), "-U", "postgres", "-A", "trust"]
    subprocess.run([*prefix, *initdb], check=True, capture_output=True, timeout=120)
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1"
    ctl = [str(bindir / "pg_ctl"), "-D", str(data / "db")]
    start = [*ctl, "-o", options, "-l", str(data / "log"), "-w", "start"]
    subprocess.run([*prefix, *start], check=True, capture_output=True, timeout=120)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        stop = [*ctl, "-m", "immediate", "stop"]
        subprocess.run([*prefix, *stop], capture_output=True, timeout=60)
        shutil.rmtree(data, ignore_errors=True)


def fresh_database(base: str) -> str:
    name = f"bench{uuid.uuid4().hex[:10]}"
    engine = create_engine(base, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return base.rsplit("/", 1)[0] + "/" + name


def _health(proc: ServerProcess) -> dict[str, Any]:
    with contextlib.suppress(httpx.HTTPError, ValueError):
        answer: dict[str, Any] = httpx.get(f"{proc.url}/healthz", timeout=1).json()
        return answer
    return {}


def _until(check: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while (value := check()) is None or value is False:
        if time.monotonic() > deadline:
            raise TimeoutError("timed out")
        time.sleep(0.05)
    return value


def _body(i: int, marks: Path) -> dict[str, Any]:
    return {
        "name": f"failover-{i}",
        "command": ["sh", "-c", TASK],
        "env": {"MARKS": str(marks), "SECONDS_": str(3 + i % 6)},
        "resources": {"cpu": "10m", "memory": "8Mi"},
    }


def trial(base_db: str, jobs: int, lease_s: float) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="hetsched-failover-"))
    marks = work / "marks"
    marks.mkdir()
    args = ["--db", fresh_database(base_db), "--lease", "cp", "--lease-s", f"{lease_s:g}"]
    args += ["--node-name", "bench-node", "--kill-grace", "1"]
    a = ServerProcess(work / "home", args, log=work / "a.log")
    b = ServerProcess(work / "home", args, log=work / "b.log")
    try:
        a.start()
        _until(lambda: _health(a).get("role") is None and _health(a).get("ok"), 60)
        b.start()
        with a.client() as client:
            ids = [client.post("/v1/jobs", json=_body(i, marks)).json()["id"] for i in range(jobs)]

        def started() -> int:
            path = marks / "start"
            return len(path.read_text().split()) if path.exists() else 0

        _until(lambda: started() >= jobs // 2, 120)
        a.kill9()
        killed = time.monotonic()
        _until(lambda: _health(b).get("ok") and _health(b).get("role") is None, 60)
        takeover = time.monotonic() - killed
        with b.client() as client:
            _until(lambda: client.post("/v1/jobs", json=_body(jobs, marks)).status_code == 201, 60)
            first = time.monotonic() - killed
            states = _until(
                lambda: (
                    (s := [client.get(f"/v1/jobs/{i}").json()["state"] for i in ids])
                    and all(x in {"succeeded", "failed", "cancelled"} for x in s)
                    and s
                ),
                300,
            )
        counts = Counter((marks / "start").read_text().split())
        return {
            "takeover_s": takeover,
            "first_submit_s": first,
            "lost": sum(1 for s in states if s != "succeeded"),
            "twice": sum(1 for i in ids if counts[i] > 1),
            "never": sum(1 for i in ids if counts[i] == 0),
        }
    finally:
        for proc in (a, b):
            proc.kill9()
            proc.stop()
        with contextlib.suppress(OSError):
            a.kill_tasks()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--lease-s", type=float, default=8.0)
    parser.add_argument("--db", help="a PostgreSQL URL (default: a throwaway cluster)")
    args = parser.parse_args()
    context = contextlib.nullcontext(args.db) if args.db else throwaway_postgres()
    with context as base:
        results = [trial(base, args.jobs, args.lease_s) for _ in range(args.trials)]
    for index, result in enumerate(results, 1):
        print(f"trial {index}: " + ", ".join(f"{k} {v:.2f}" for k, v in result.items()))
    for key in ("takeover_s", "first_submit_s"):
        values = [r[key] for r in results]
        print(f"{key}: median {statistics.median(values):.2f}, max {max(values):.2f}")
    print(f"load: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
