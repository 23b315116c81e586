"""The leader of a standby pair SIGKILLed in every phase of a job's life, one kill per
cycle, on one pair under a stream of submissions (the crash soak's phases, for a pair).

Two ``hetsched up --lease`` on one PostgreSQL and one home, each on a port of its own. A
client submits a job every ~0.1 s, each with its own idempotency key, asking the two URLs
in turn until one acknowledges it (a standby's 307, a 503, a refused connection: the
other one is asked). Every job's command notes its start (job id and run) and its end in
files outside the home. Each cycle kills the leader of the moment in one phase:

- ``submit``: while submissions are in flight (the stream never stops);
- ``bind``: right after the leader acknowledged a job, before its next turn;
- ``run``: while tasks run;
- ``cancel_grace``: a job whose command ignores SIGTERM is cancelled and the leader killed
  in its stop grace;
- ``takeover``: the standby killed the moment it takes the lease, while it builds the
  service (recovery, adoption), so the restarted first leader takes over from it.

The killed process is started again (it comes back as the standby). Checked at the end:
every acknowledged job is in the store once (none lost, no retry stored twice), every job
ended as it should (succeeded; the stubborn ones cancelled), every task started exactly
once (none started twice, none never started) and every succeeded job's end was noted
(no exit lost).
"""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hetsched.controlplane import LeaseBook, Store
from hetsched.service.testing import ServerProcess, free_port
from pg_fixture import new_database
from waiting import until

pytestmark = pytest.mark.slow

LEASE_S = 4.0
PHASES = ("submit", "bind", "run", "cancel_grace", "takeover")
TASK = (
    'echo "$HETSCHED_JOB_ID $HETSCHED_RUN" >> "$MARKS/start"; sleep {s}; '
    'echo "$HETSCHED_JOB_ID" >> "$MARKS/end"'
)
#: ignores SIGTERM: only the stop grace's SIGKILL ends it
STUBBORN = 'echo "$HETSCHED_JOB_ID $HETSCHED_RUN" >> "$MARKS/start"; trap "" TERM; sleep 30'
#: the pair's restarts take longer than one process's
_until = functools.partial(until, timeout_s=90.0)
TERMINAL = {"succeeded", "failed", "cancelled", "rejected"}


@pytest.fixture
def db(postgres_url: str) -> str:
    return new_database(postgres_url, "phases")


class Pair:
    """The two processes, each on a port of its own across its restarts."""

    def __init__(self, tmp: Path, db: str, marks: Path) -> None:
        self.marks = marks
        ports = [free_port(), free_port()]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        args = ["--db", db, "--lease", "cp", "--lease-s", f"{LEASE_S:g}"]
        args += ["--node-name", "pair-node", "--kill-grace", "2"]
        self.procs = [
            ServerProcess(
                tmp / "home",
                [*args, "--advertise-url", f"{urls[i]},{urls[1 - i]}"],
                log=tmp / f"server{i}.log",
                port=ports[i],
            )
            for i in (0, 1)
        ]
        self.urls = urls

    def leader(self) -> ServerProcess | None:
        for proc in self.procs:
            if proc.proc is None or proc.proc.poll() is not None:
                continue
            try:
                health = httpx.get(f"{proc.url}/healthz", timeout=2).json()
            except httpx.HTTPError:
                continue
            if health.get("ok") and health.get("role") != "standby":
                return proc
        return None

    def other(self, proc: ServerProcess) -> ServerProcess:
        return self.procs[1 - self.procs.index(proc)]

    def revive(self) -> None:
        """Start again each process that is not running (it comes back as the standby)."""
        for proc in self.procs:
            if proc.proc is not None and proc.proc.poll() is not None:
                proc.stop()  # closes its log
                proc.start(timeout_s=120)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Ask the URLs in turn until one answers below 300 or with a 4xx of its own."""
        headers = {"Authorization": f"Bearer {self.procs[0].token}", **kwargs.pop("headers", {})}
        deadline = time.monotonic() + 180
        while True:
            assert time.monotonic() < deadline, f"{method} {path}: no answer in 180 s"
            for url in self.urls:
                try:
                    answer = httpx.request(
                        method, url + path, headers=headers, timeout=10, **kwargs
                    )
                except httpx.TransportError:
                    continue
                if answer.status_code < 300 or 400 <= answer.status_code < 500:
                    return answer
            time.sleep(0.1)

    def close(self) -> None:
        for proc in self.procs:
            proc.kill9()
            proc.stop()
        if (self.procs[0].home / "instance").exists():
            self.procs[0].kill_tasks()


class Stream:
    """The submitting client (a thread): job ``i`` with key ``k<i>`` until acknowledged."""

    def __init__(self, pair: Pair) -> None:
        self.pair = pair
        self.acked: dict[str, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.count = 0

    def submit(self, i: int, command: str = TASK.format(s=1.0)) -> str:
        body = {
            "name": f"job-{i}",
            "command": ["sh", "-c", command],
            "env": {"MARKS": str(self.pair.marks)},
            "resources": {"cpu": "0.1", "memory": "16Mi"},
            "max_restarts": 0,
        }
        answer = self.pair.request(
            "POST", "/v1/jobs", json=body, headers={"Idempotency-Key": f"k{i}"}
        )
        assert answer.status_code in (200, 201), answer.text
        self.acked[f"k{i}"] = answer.json()["id"]
        return str(answer.json()["id"])

    def _run(self) -> None:
        while not self.stop.is_set():
            self.submit(self.count, TASK.format(s=0.5 + (self.count % 3) * 0.5))
            self.count += 1
            time.sleep(0.1)

    def __enter__(self) -> Stream:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=200)


@pytest.fixture
def pair(tmp_path: Path, db: str) -> Iterator[Pair]:
    marks = tmp_path / "marks"
    marks.mkdir()
    made = Pair(tmp_path, db, marks)
    try:
        made.procs[0].start(timeout_s=120)
        _until("the first leads", made.leader)
        made.procs[1].start(timeout_s=120)
        yield made
    finally:
        made.close()


def _started(marks: Path) -> list[str]:
    path = marks / "start"
    return path.read_text().split("\n")[:-1] if path.exists() else []


def _kill_in(phase: str, pair: Pair, stream: Stream, book: LeaseBook) -> str | None:
    """Bring the pair into ``phase`` and SIGKILL its leader there; returns the id of the
    stubborn job the phase cancelled, if any."""
    leader = _until("a leader", pair.leader)
    if phase == "bind":
        stream.submit(10_000 + stream.count)  # acknowledged: the kill follows at once
    elif phase == "run":
        seen = len(_started(pair.marks))
        _until("a task starts", lambda: len(_started(pair.marks)) > seen)
    elif phase == "cancel_grace":
        stubborn = stream.submit(20_000 + stream.count, STUBBORN)
        _until("the stubborn task runs", lambda: any(stubborn in s for s in _started(pair.marks)))
        answer = pair.request("POST", f"/v1/jobs/{stubborn}/cancel")
        assert answer.status_code == 202, answer.text
        leader.kill9()  # inside its 2 s grace
        return stubborn
    elif phase == "takeover":
        held = book.current()
        assert held is not None
        leader.kill9()
        leader.stop()
        leader.launch()  # the standby-to-be: it takes over from the next one
        _until("the lease taken", lambda: _epoch(book) > held.epoch)
        taken = book.current()
        assert taken is not None
        taker = next(p for p in pair.procs if p.url == taken.url)
        taker.kill9()  # while it builds the service
        return None
    leader.kill9()
    return None


def _epoch(book: LeaseBook) -> int:
    held = book.current()
    return 0 if held is None else held.epoch


def _cycle(phase: str, pair: Pair, stream: Stream, book: LeaseBook) -> str | None:
    """One kill in ``phase``; returns when a process leads under a later epoch and the
    killed one is back as the standby."""
    epoch = _epoch(book)
    stubborn = _kill_in(phase, pair, stream, book)
    _until(f"a new leader after {phase}", lambda: _epoch(book) > epoch and pair.leader())
    pair.revive()
    return stubborn


def test_the_leader_killed_in_every_phase_loses_nothing_and_starts_nothing_twice(
    pair: Pair, db: str
) -> None:
    store = Store(db)
    book = LeaseBook(store, "cp", "reader", "", LEASE_S)
    cancelled: set[str] = set()
    try:
        with Stream(pair) as stream:
            for phase in PHASES:
                stubborn = _cycle(phase, pair, stream, book)
                cancelled |= {stubborn} if stubborn else set()
        ids = sorted(stream.acked.values())
        jobs = _until("every job ends", lambda: _all_ended(store, ids), timeout_s=180)
    finally:
        store.close()
    _check(pair.marks, stream.acked, jobs, cancelled)


def _all_ended(store: Store, ids: list[str]) -> dict[str, Any] | None:
    rows = {r["id"]: dict(r) for r in store.jobs_by_ids(ids)}
    if len(rows) == len(ids) and all(r["state"] in TERMINAL for r in rows.values()):
        return rows
    return None


def _check(marks: Path, acked: dict[str, str], jobs: dict[str, Any], cancelled: set[str]) -> None:
    assert len(set(acked.values())) == len(acked)  # one job per key: no retry stored twice
    ends = Counter((marks / "end").read_text().split())
    starts = Counter(line.split()[0] for line in _started(marks))
    for job_id, row in jobs.items():
        want = "cancelled" if job_id in cancelled else "succeeded"
        assert row["state"] == want, (job_id, row["state"], row["reason"])
        assert starts[job_id] == 1, (job_id, starts[job_id])  # once: none twice, none never
        if want == "succeeded":
            assert ends[job_id] == 1, job_id  # its exit recorded, after its one run
    # (a run may be numbered 2: one bound but never spawned when the leader died goes back
    # to the queue; its command still runs once)
    assert set(starts) == set(jobs), set(starts) ^ set(jobs)
