"""The crash soak: ``hetsched up`` SIGKILLed at random moments across every phase of a job's
life, restarted on the same home, and checked after every restart.

A background client submits a stream of jobs (CPU only, whole GPUs, GPU shares), each with
its own idempotency key, retrying through the outages until it gets an answer; another
cancels random jobs. Each cycle then picks a phase, brings the service into it, and kills it
there (the kill comes at a random moment inside the phase):

- ``submit``: while submissions are in flight;
- ``bind``: right after a job is accepted, while the loop binds it;
- ``run``: while a task runs;
- ``cancel_grace``: a job whose command ignores SIGTERM is cancelled; the kill lands in its
  stop grace (fault 1 of the hostile round);
- ``preempt_grace``: a high-priority job preempts a low-priority one that ignores SIGTERM;
  the kill lands in the preemption's grace;
- ``gang_hold``: a gang of three waits for the third device of its class;
- ``unplug``: the GPU of a running task disappears (fake sysfs tree), the kill follows;
- ``restart``: the service is killed while it starts (during recovery).

After each restart: every acknowledged job is in the store once (none lost, none duplicated
by a retried submission), no live allocation is held by a task that is not live, no device
held more than its capacity at any time of the allocation history, the loop is not wedged
and a probe job runs to its end. At the end every job reaches a terminal state and nothing
stays allocated.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from service_fixtures import over_capacity

from agent.sysfs import SysfsTree
from hetsched.service.testing import ServerProcess

__all__ = ["PHASES", "Report", "run_soak"]

PHASES = (
    "submit",
    "bind",
    "run",
    "cancel_grace",
    "preempt_grace",
    "gang_hold",
    "unplug",
    "restart",
)
TERMINAL = {"succeeded", "failed", "cancelled", "rejected"}
LIVE_TASK = {"starting", "running", "stopping", "reserved"}
ADDRESS = "0000:1b:00.0"

CLUSTER = """
nodes:
  - name: soak-node
    cpu: "32"
    memory: 64Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 4}
      - {class: fpga, vendor: xilinx, model: U250, count: 1}
      - {class: npu, vendor: acme, model: N1, count: 3}
"""
PROFILE = """
name: soak
queue_sort: {name: priority}
post_filter: [{name: preemption, args: {grace_s: 1.5, priority: true}}]
"""
#: ignores SIGTERM: it ends by its SIGKILL after the grace, or by itself
STUBBORN = ["sh", "-c", "trap '' TERM; sleep 4"]
#: a start that takes longer is a wedge; on a loaded machine starting (imports, recovery)
#: takes tens of seconds, which is slowness, not a wedge
START_S = 300.0
SMALL = {"cpu": "1", "memory": "64Mi"}


@dataclass
class Report:
    seed: int
    cycles: int
    phases: Counter[str] = field(default_factory=Counter)
    #: phases whose setup did not reach the state aimed at before the kill
    missed: Counter[str] = field(default_factory=Counter)
    jobs: int = 0
    allocations: int = 0
    states: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        phases = ", ".join(f"{p} {self.phases[p]}" for p in PHASES)
        missed = dict(self.missed) or "none"
        return (
            f"soak (seed {self.seed}): {self.cycles} kills and restarts ({phases}); "
            f"{self.jobs} jobs {self.states}, {self.allocations} allocations; "
            f"phases not reached before the kill: {missed}"
        )


def _body(kind: str, i: int) -> dict[str, Any]:
    resources: dict[str, Any] = dict(SMALL)
    command = ["sleep", "0.1"]
    if kind == "gpu":
        resources["devices"] = [{"class": "gpu", "count": 1}]
        command = ["sleep", "0.5"]
    elif kind == "share":
        resources["devices"] = [{"class": "gpu", "count": 1, "share": 500}]
        command = ["sleep", "0.3"]
    return {
        "name": f"soak-{kind}-{i}",
        "command": command,
        "resources": resources,
        "restart_policy": "on_failure",
        "max_restarts": 3,
    }


class _Client:
    """Submissions and cancels that retry through outages; ``url`` follows the server."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.acked: dict[str, str] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.server.token}", **kwargs.pop("headers", {})}
        deadline = time.monotonic() + 180
        while True:
            assert time.monotonic() < deadline, f"{method} {path}: no answer in 180 s"
            try:
                answer = httpx.request(
                    method, self.server.url + path, headers=headers, timeout=10, **kwargs
                )
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            if answer.status_code >= 500:
                time.sleep(0.05)
                continue
            return answer

    def submit(self, key: str, body: dict[str, Any]) -> str:
        answer = self.request("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": key})
        assert answer.status_code in (200, 201), answer.text
        job_id: str = answer.json()["id"]
        with self.lock:
            assert self.acked.setdefault(key, job_id) == job_id, f"{key}: a retry made a new job"
        return job_id

    def cancel(self, job_id: str) -> None:
        answer = self.request("POST", f"/v1/jobs/{job_id}/cancel")
        assert answer.status_code in (202, 409), answer.text

    def job(self, job_id: str) -> dict[str, Any]:
        answer = self.request("GET", f"/v1/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    def jobs(self) -> list[dict[str, Any]]:
        """Every job, page after page (the API answers at most one page per request)."""
        out: list[dict[str, Any]] = []
        params: dict[str, Any] = {"all": True, "limit": 10_000}
        while True:
            answer = self.request("GET", "/v1/jobs", params=params)
            out += answer.json()
            cursor = answer.headers.get("X-Next-Cursor")
            if not cursor:
                return out
            params = {**params, "cursor": cursor}

    def alerts(self) -> dict[str, Any]:
        return self.request("GET", "/v1/alerts").json()  # type: ignore[no-any-return]

    def background(self, rng: random.Random) -> None:
        """Submit a stream of jobs (a few retried on purpose) and cancel some; a broken
        invariant is kept in :attr:`error` for the main thread."""
        try:
            self._feed(rng)
        except BaseException as exc:  # handed to the main thread
            self.error = exc

    def _feed(self, rng: random.Random) -> None:
        i = 0
        while not self.stop.is_set():
            kind = rng.choice(("cpu", "cpu", "gpu", "share"))
            key = f"soak-{i}"
            for _ in range(2 if rng.random() < 0.1 else 1):
                job_id = self.submit(key, _body(kind, i))
            if rng.random() < 0.1:
                self.cancel(job_id)
            i += 1
            time.sleep(rng.uniform(0.05, 0.3))


def _until(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def _running(client: _Client, job_id: str) -> bool:
    tasks = client.job(job_id).get("tasks", [])
    return bool(tasks) and all(t["state"] == "running" and t["pid"] for t in tasks)


class _Soak:
    def __init__(self, root: Path, seed: int) -> None:
        self.rng = random.Random(seed)
        self.root = root
        self.sysfs = SysfsTree(root / "sys")
        self.plugged = False
        self._plug()
        (root / "cluster.yaml").write_text(CLUSTER)
        (root / "profile.yaml").write_text(PROFILE)
        args = [
            *("--cluster", str(root / "cluster.yaml"), "--profile", str(root / "profile.yaml")),
            *("--node-name", "local", "--backend", "cpu,pci", "--sysfs-root", str(root / "sys")),
            *("--watch-interval", "0.1", "--rate-limit", "0", "--kill-grace", "1.5"),
        ]
        self.server = ServerProcess(root / "home", args)
        self.client = _Client(self.server)
        self.db = root / "home" / "hetsched.db"
        self.n = 0

    def _plug(self) -> None:
        if not self.plugged:
            self.sysfs.pci(ADDRESS, 0x10DE, 0x2330, 0x030200, numa=0)
            self.plugged = True

    def _submit(self, kind: str, body: dict[str, Any]) -> str:
        self.n += 1
        return self.client.submit(f"phase-{kind}-{self.n}", {**body, "name": f"{kind}-{self.n}"})

    # -- phases: each returns whether it reached the state it aims the kill at ------------

    def submit(self) -> bool:
        time.sleep(self.rng.uniform(0.0, 0.5))
        return True

    def bind(self) -> bool:
        self._submit("bind", _body("gpu", self.n))
        time.sleep(self.rng.uniform(0.0, 0.05))
        return True

    def run(self) -> bool:
        job = self._submit("run", {**_body("cpu", self.n), "command": ["sleep", "2"]})
        reached = _until(lambda: _running(self.client, job), 20)
        time.sleep(self.rng.uniform(0.0, 0.3))
        return reached

    def cancel_grace(self) -> bool:
        body = {"command": STUBBORN, "resources": {**SMALL}}
        job = self._submit("stubborn", body)
        reached = _until(lambda: _running(self.client, job), 20)
        self.client.cancel(job)
        time.sleep(self.rng.uniform(0.0, 1.4))
        return reached

    def preempt_grace(self) -> bool:
        fpga = {**SMALL, "devices": [{"class": "fpga"}]}
        low = self._submit("low", {"command": STUBBORN, "resources": fpga, "priority": 0})
        reached = _until(lambda: _running(self.client, low), 20)
        body = {"command": ["sleep", "0.3"], "resources": fpga, "priority": 10}
        self._submit("high", body)
        reached = reached and _until(lambda: self.client.job(low)["preemptions"] > 0, 10)
        time.sleep(self.rng.uniform(0.0, 1.4))
        return reached

    def gang_hold(self) -> bool:
        npu = {**SMALL, "devices": [{"class": "npu"}]}
        holder = self._submit("holder", {"command": ["sleep", "1.5"], "resources": npu})
        reached = _until(lambda: _running(self.client, holder), 20)
        self._submit("gang", {"command": ["sleep", "0.3"], "resources": npu, "replicas": 3})
        time.sleep(self.rng.uniform(0.0, 0.8))
        return reached

    def _h100_seen(self) -> bool:
        nodes = self.client.request("GET", "/v1/nodes").json()
        devices = [d for n in nodes for d in n["devices"]]
        return any(d["model"] == "H100-SXM5-80GB" and d["healthy"] for d in devices)

    def unplug(self) -> bool:
        self._plug()
        # plugged back after the last unplug: the watcher sees it within its interval
        if not _until(self._h100_seen, 20):
            return False
        h100 = {**SMALL, "devices": [{"class": "gpu", "model": "H100-SXM5-80GB"}]}
        body = {"command": ["sleep", "3"], "resources": h100, "on_device_failure": "requeue"}
        job = self._submit("h100", body)
        reached = _until(lambda: _running(self.client, job), 20)
        self.sysfs.unplug(ADDRESS)
        self.plugged = False
        time.sleep(self.rng.uniform(0.0, 0.5))
        return reached

    def restart(self) -> bool:
        self.server.kill9()
        self.server.launch()
        time.sleep(self.rng.uniform(0.0, 1.5))
        return True

    # -- checks ---------------------------------------------------------------------------

    def check(self, final: bool = False) -> tuple[int, int, dict[str, int]]:
        with self.client.lock:
            acked = dict(self.client.acked)
        db = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, isolation_level=None)
        db.row_factory = sqlite3.Row
        try:
            db.execute("BEGIN")  # one read transaction: the three reads see one snapshot
            rows = db.execute("SELECT id, request_key, state FROM jobs").fetchall()
            history = db.execute("SELECT * FROM allocations").fetchall()
            live_tasks = {
                (r["job_id"], r["task"], r["run"])
                for r in db.execute("SELECT job_id, task, run, state FROM tasks")
                if r["state"] in LIVE_TASK
            }
            db.execute("COMMIT")
        finally:
            db.close()
        by_key: dict[str, list[str]] = defaultdict(list)
        for row in rows:
            if row["request_key"] is not None:
                by_key[row["request_key"]].append(row["id"])
        lost = {k: v for k, v in acked.items() if by_key.get(k) != [v]}
        assert lost == {}, f"acknowledged jobs lost or duplicated: {lost}"
        assert [k for k, v in by_key.items() if len(v) > 1] == [], "a key made two jobs"
        orphans = [
            dict(r)
            for r in history
            if r["live"] and (r["job_id"], r["task"], r["run"]) not in live_tasks
        ]
        assert orphans == [], f"allocations held by no live task: {orphans}"
        assert over_capacity(history) == [], "a device held more than its capacity"
        if final:
            unfinished = [dict(r) for r in rows if r["state"] not in TERMINAL]
            assert unfinished == [], f"jobs not ended: {unfinished[:5]} ({len(unfinished)})"
            held = [dict(r) for r in history if r["live"]]
            assert held == [], f"allocations still live at the end: {held[:5]} ({len(held)})"
        return len(rows), len(history), dict(Counter(r["state"] for r in rows))

    def probe(self) -> None:
        """No wedge: the loop runs a new job to its end."""
        job = self._submit("probe", {"command": ["true"], "resources": {"cpu": "100m"}})
        ended = _until(lambda: self.client.job(job)["state"] in TERMINAL, 60)
        state = self.client.job(job)["state"]
        assert ended and state == "succeeded", f"probe {job}: {state}"
        alerts = self.client.alerts()
        assert not alerts["wedged"], alerts["loop"]

    def finish(self) -> None:
        self._plug()
        assert _until(lambda: all(j["state"] in TERMINAL for j in self.client.jobs()), 240), [
            j for j in self.client.jobs() if j["state"] not in TERMINAL
        ]


def run_soak(
    root: Path, cycles: int, seed: int, progress: Callable[[int], None] | None = None
) -> Report:
    """Run ``cycles`` kill-and-restart cycles under ``root``; raises AssertionError naming
    the seed on the first broken invariant."""
    soak = _Soak(root, seed)
    report = Report(seed, cycles)
    soak.server.start(START_S)
    feeder = threading.Thread(
        target=soak.client.background, args=(random.Random(seed + 1),), daemon=True
    )
    feeder.start()
    try:
        for cycle in range(cycles):
            phase = PHASES[cycle % len(PHASES)] if cycle < len(PHASES) else soak.rng.choice(PHASES)
            report.phases[phase] += 1
            try:
                if not getattr(soak, phase)():
                    report.missed[phase] += 1
                soak.server.kill9()
                soak.server.start(START_S)
                soak.check()
                soak.probe()
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}, cycle {cycle} ({phase}): {exc}") from exc
            if soak.client.error is not None:
                raise AssertionError(f"seed {seed}: submitter: {soak.client.error}")
            if progress is not None:
                progress(cycle + 1)
        soak.client.stop.set()
        feeder.join(timeout=200)
        assert not feeder.is_alive(), f"seed {seed}: the submitter is stuck"
        assert soak.client.error is None, f"seed {seed}: submitter: {soak.client.error}"
        soak.finish()
        report.jobs, report.allocations, report.states = soak.check(final=True)
    finally:
        soak.client.stop.set()
        soak.server.stop()
        soak.server.kill_tasks()
    return report
