"""A standby pair: two `hetsched up --lease` processes on one PostgreSQL and one home.

- one leads, the other serves reads and redirects the rest; the CLI, given both URLs,
  follows the leader;
- the leader SIGKILLed with jobs in flight: the standby takes over, adopts the running
  tasks, and every job ends succeeded with its task started exactly once (how long the
  takeover takes is measured by bench/standby_failover.py);
- the old leader restarted comes back as the standby of the new one;
- a leader frozen (SIGSTOP) past its lease and thawed finds its lease taken and ends at
  once (exit 3) without starting anything.
"""

from __future__ import annotations

import json
import signal
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.controlplane import LeaseBook, Store
from hetsched.service.testing import ServerProcess, free_port
from pg_fixture import new_database
from tlscerts import make_pki
from waiting import until as _until

pytestmark = pytest.mark.slow

LEASE_S = 4.0
#: each task notes its start, sleeps, and notes its end, in files of its own
TASK = (
    'echo "$HETSCHED_JOB_ID $HETSCHED_RUN" >> "$MARKS/start"; sleep {s}; '
    'echo "$HETSCHED_JOB_ID" >> "$MARKS/end"'
)


@pytest.fixture
def db(postgres_url: str) -> str:
    return new_database(postgres_url, "pair")


class Pair:
    def __init__(self, tmp: Path, db: str) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.args = ["--db", db, "--lease", "cp", "--lease-s", f"{LEASE_S:g}"]
        self.args += ["--node-name", "pair-node", "--kill-grace", "1"]
        self.procs: list[ServerProcess] = []

    def start(self, name: str, *extra: str, port: int | None = None) -> ServerProcess:
        log = self.tmp / f"{name}.log"
        proc = ServerProcess(self.home, [*self.args, *extra], log=log, port=port)
        proc.start()
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.proc is not None and proc.proc.poll() is None:
                proc.kill9()
            proc.stop()
        if (self.home / "instance").exists():
            self.procs[0].kill_tasks()


@pytest.fixture
def pair(tmp_path: Path, db: str) -> Iterator[Pair]:
    made = Pair(tmp_path, db)
    try:
        yield made
    finally:
        made.close()


def _health(proc: ServerProcess) -> dict[str, Any]:
    try:
        answer: dict[str, Any] = httpx.get(f"{proc.url}/healthz", timeout=2).json()
        return answer
    except httpx.HTTPError:
        return {}


def _leads(proc: ServerProcess) -> bool:
    health = _health(proc)
    return bool(health) and health.get("role") != "standby"


def _cli(urls: str, token: str, *args: str) -> tuple[int, str]:
    env = {"HETSCHED_URL": urls, "HETSCHED_TOKEN": token, "HETSCHED_CA": None}
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout + result.stderr


def _body(i: int, marks: Path, seconds: float) -> dict[str, Any]:
    return {
        "name": f"pair-{i}",
        "command": ["sh", "-c", TASK.format(s=seconds)],
        "env": {"MARKS": str(marks)},
        "resources": {"cpu": "0.1", "memory": "16Mi"},
    }


def test_the_standby_serves_reads_and_the_cli_follows_the_leader(
    pair: Pair, tmp_path: Path
) -> None:
    leader = pair.start("a")
    _until("a leads", lambda: _leads(leader))
    standby = pair.start("b")
    health = _health(standby)
    assert health == {"ok": True, "role": "standby", "leader": leader.url}
    token = leader.token
    job_file = tmp_path / "job.yaml"
    body = {"name": "via-standby", "command": ["true"], "resources": {"cpu": "0.1"}}
    job_file.write_text(json.dumps(body))
    code, out = _cli(f"{standby.url},{leader.url}", token, "submit", "-o", "json", str(job_file))
    assert code == 0, out
    (job,) = json.loads(out)
    # a read is served by the standby itself, from the store
    headers = {"Authorization": f"Bearer {token}"}
    answer = httpx.get(f"{standby.url}/v1/jobs/{job['id']}", headers=headers, timeout=10)
    assert answer.status_code == 200 and answer.headers["X-Hetsched-Role"] == "standby"
    assert answer.json()["name"] == "via-standby"
    assert httpx.get(f"{standby.url}/v1/jobs/{job['id']}", timeout=10).status_code == 401
    # a write is redirected to the leader; a CLI that was not given the leader's URL says so
    code, out = _cli(standby.url, token, "submit", "-o", "json", str(job_file))
    assert code == 1 and "Traceback" not in out
    assert f"is a standby; the leader is at {leader.url}" in " ".join(out.split())


def test_the_standby_takes_over_a_killed_leader_and_adopts_its_tasks(
    pair: Pair, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    leader = pair.start("a")
    _until("a leads", lambda: _leads(leader))
    standby = pair.start("b")
    ids = []
    with leader.client() as client:
        for i in range(20):
            answer = client.post("/v1/jobs", json=_body(i, marks, 2.0 + (i % 4)))
            assert answer.status_code == 201, answer.text
            ids.append(answer.json()["id"])
        _until("tasks running", lambda: (marks / "start").exists())
    leader.kill9()
    _until("b leads", lambda: _leads(standby), timeout_s=60)  # the time: bench/standby_failover.py
    with standby.client() as client:
        jobs = _until(
            "every job ends",
            lambda: (
                (js := [client.get(f"/v1/jobs/{i}").json() for i in ids])
                and all(j["state"] in {"succeeded", "failed", "cancelled"} for j in js)
                and js
            ),
        )
    ended = [(j["name"], j["state"], j["reason"]) for j in jobs]
    assert [j["state"] for j in jobs] == ["succeeded"] * 20, ended
    starts = (marks / "start").read_text().split("\n")[:-1]
    started = sorted(line.split()[0] for line in starts)
    assert started == sorted(ids)  # each task started once: none lost, none twice
    assert sorted((marks / "end").read_text().split()) == sorted(ids)
    # the old leader comes back as the standby of the new one
    again = pair.start("a2")
    assert _health(again) == {"ok": True, "role": "standby", "leader": standby.url}


def test_a_frozen_leader_thawed_after_a_takeover_ends_without_starting_anything(
    pair: Pair, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    leader = pair.start("a")
    _until("a leads", lambda: _leads(leader))
    standby = pair.start("b")
    assert leader.proc is not None
    leader.proc.send_signal(signal.SIGSTOP)
    _until("b leads", lambda: _leads(standby), timeout_s=30)
    with standby.client() as client:
        answer = client.post("/v1/jobs", json=_body(0, marks, 0.1))
        assert answer.status_code == 201, answer.text
    leader.proc.send_signal(signal.SIGCONT)
    assert leader.proc.wait(timeout=30) == 3
    assert "another process took it over; stepping down" in leader.log_text()
    with standby.client() as client:
        job_id = answer.json()["id"]
        _until(
            "the job ends", lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] == "succeeded"
        )
    assert (marks / "start").read_text().split() == [job_id, "1"]


def test_a_task_reports_to_whichever_of_the_pair_leads(pair: Pair, tmp_path: Path) -> None:
    """Tasks are told both URLs of the pair (``--advertise-url``, own first): a checkpoint
    reported after its leader died reaches the new one."""
    gate = tmp_path / "gate"
    ports = free_port(), free_port()
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    leader = pair.start("a", "--advertise-url", ",".join(urls), port=ports[0])
    _until("a leads", lambda: _leads(leader))
    standby = pair.start("b", "--advertise-url", ",".join(reversed(urls)), port=ports[1])
    script = f"while [ ! -e {gate} ]; do sleep 0.1; done; hetsched checkpoint --step 3"
    body = {"name": "reports", "command": ["sh", "-c", script], "resources": {"cpu": "0.1"}}
    with leader.client() as client:
        answer = client.post("/v1/jobs", json=body)
        assert answer.status_code == 201, answer.text
        job_id = answer.json()["id"]
        running = lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] == "running"  # noqa: E731
        _until("the task runs", running)
    leader.kill9()
    _until("b leads", lambda: _leads(standby), timeout_s=30)
    gate.touch()
    with standby.client() as client:
        state = lambda: client.get(f"/v1/jobs/{job_id}").json()  # noqa: E731
        job = _until(
            "the job ends", lambda: (j := state())["state"] in {"succeeded", "failed"} and j
        )
        log = client.get(f"/v1/jobs/{job_id}/logs").json()["data"]
    assert job["state"] == "succeeded", (job, log)
    assert job["checkpoint"]["step"] == 3


def test_a_pair_needs_a_postgresql_store(tmp_path: Path) -> None:
    args = ["up", "--home", str(tmp_path / "home"), "--lease", "cp"]
    result = CliRunner().invoke(app, args, env={"HETSCHED_CA": None})
    out = result.stdout + result.stderr
    assert result.exit_code == 2 and "Traceback" not in out
    assert "--lease needs --db postgresql+psycopg://...: a store both processes" in out


def test_a_leader_stopped_cleanly_hands_the_lease_on_before_it_expires(pair: Pair, db: str) -> None:
    """SIGTERM ends the lease at once (it would otherwise run until a renewal made less
    than a third of a lease ago runs out), so a standby takes over at its next try."""
    leader = pair.start("a")
    _until("a leads", lambda: _leads(leader))
    store = Store(db)
    try:
        book = LeaseBook(store, "cp", "reader", "", LEASE_S)
        leader.stop()  # SIGTERM
        stopped_at = time.time()
        assert leader.proc is not None and leader.proc.returncode == 0
        released = book.current()
        assert released is not None and released.epoch == 1
        assert released.expires_at <= stopped_at
        standby = pair.start("b")
        _until("b leads", lambda: _leads(standby), timeout_s=30)
        taken = book.current()
    finally:
        store.close()
    assert taken is not None and taken.epoch == 2 and taken.url == standby.url


def test_a_pair_over_https_is_followed_by_the_cli_with_its_ca(tmp_path: Path, db: str) -> None:
    pki = make_pki(tmp_path / "pki")
    verify = ssl.create_default_context(cafile=str(pki.ca))
    tls = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    args = ["--db", db, "--lease", "cp", "--lease-s", f"{LEASE_S:g}", "--node-name", "n", *tls]
    home = tmp_path / "home"
    procs = [
        ServerProcess(home, args, log=tmp_path / f"{n}.log", verify=verify) for n in ("a", "b")
    ]
    try:

        def health(proc: ServerProcess) -> dict[str, Any]:
            answer: dict[str, Any] = httpx.get(f"{proc.url}/healthz", verify=verify).json()
            return answer

        procs[0].start()
        _until("a leads", lambda: health(procs[0]).get("role") is None)
        procs[1].start()
        assert health(procs[1]) == {"ok": True, "role": "standby", "leader": procs[0].url}
        assert procs[0].url.startswith("https://")
        job_file = tmp_path / "job.json"
        job_file.write_text(
            json.dumps({"name": "tls-pair", "command": ["true"], "resources": {"cpu": "0.1"}})
        )
        urls = f"{procs[1].url},{procs[0].url}"
        env = {"HETSCHED_URL": urls, "HETSCHED_TOKEN": procs[0].token, "HETSCHED_CA": str(pki.ca)}
        result = CliRunner().invoke(app, ["submit", "-o", "json", str(job_file)], env=env)
        assert result.exit_code == 0, result.stdout + result.stderr
        assert json.loads(result.stdout)[0]["name"] == "tls-pair"
    finally:
        for proc in procs:
            proc.stop()
        procs[0].kill_tasks()
