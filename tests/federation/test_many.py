"""The done-criterion run: three `hetsched up` members as processes on 127.0.0.1 and a
federation in front of them; 200 jobs of mixed shapes; one member SIGKILLed and another
partitioned (a proxy that drops its traffic) and healed during the run.

Checked from the tasks' own output: every job ends (succeeded), no task of a job ran twice
at the same time (a lock per task, dropped by the kernel when its process dies), and
team-a's quota of 2 GPUs held across the federation (each of its tasks takes one of two
quota slots, or says QUOTA). Short tasks keep it to about a minute on two busy cores.

On a loaded machine (the suite runs beside other work) the lease, the members' call
timeout, the fencing margin and every deadline are scaled by the load per core
(``load_factor``): a 3 s lease lapses for want of CPU under load 20, and a member fenced
for that has its jobs stopped and run again, over and over, so the run never ends. The
checks stay the same: every job succeeds, no task runs twice at once, the quota holds,
and the killed and partitioned members' jobs run again elsewhere.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from fed_fixtures import Fed, events, job_body, load_factor, members_yaml, task
from procs import MemberProcess, Proxy
from test_failover import processes

from hetsched.federation.server import FederationOptions
from hetsched.federation.testing import running_federation

pytestmark = pytest.mark.slow

JOBS = 200
LEASE = 3.0


def _body(i: int, out: Path) -> dict[str, Any]:
    kind = i % 5
    # a few long enough to be running when a member dies or is cut off
    seconds = 8.0 if i % 23 == 0 else (1.5 if i % 17 == 0 else 0.3)
    resources: dict[str, Any] = {"cpu": "1", "memory": "256Mi"}
    body: dict[str, Any] = {}
    if kind == 1:
        resources["devices"] = [{"class": "gpu", "count": 1}]
    elif kind == 2:
        resources["devices"] = [{"class": "gpu", "count": 1, "share": 500}]
    elif kind == 3:
        resources["devices"] = [{"class": "gpu", "count": 1}]
        body["queue"] = "team-a"
    elif kind == 4:
        body["replicas"] = 2
    slots = 1 if kind == 3 else 0
    command = task(out, f"m{i}", seconds, slots=slots, slot_count=2)
    return job_body(f"many-{i}", command=command, resources=resources, **body)


def _config(tmp: Path) -> tuple[Path, Path]:
    profile = tmp / "profile.yaml"
    profile.write_text(
        "name: fed\n"
        "flavors: [gpu]\n"
        "queues:\n"
        "  - {name: default}\n"
        "  - {name: team-a, nominal: {gpu: 2}, borrowing_limit: {gpu: 0}}\n"
    )
    queues = tmp / "queues.yaml"
    queues.write_text("queues:\n  - {name: default}\n  - {name: team-a}\n")
    return profile, queues


def _done(fed: Fed, ids: list[str]) -> int:
    rows = fed.client.get("/v1/jobs", params={"all": True, "limit": 10_000}).json()
    ended = {r["id"] for r in rows if r["state"] in ("succeeded", "failed", "cancelled")}
    return sum(1 for i in ids if i in ended)


def test_200_jobs_with_a_member_killed_and_another_partitioned(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    profile, queues = _config(tmp_path)
    slow = load_factor()
    with processes(tmp_path, timeout=90 * slow) as members:
        proxy = Proxy(members["b"].port)
        try:
            urls = {n: (proxy.url if n == "b" else m.url) for n, m in members.items()}
            tokens = {n: m.token for n, m in members.items()}
            path = members_yaml(
                tmp_path, urls, tokens, LEASE * slow, timeout=2.0 * slow, margin=0.5 * slow
            )
            options = FederationOptions(
                members=path,
                home=tmp_path / "federation",
                profile=profile,
                queues=queues,
                rate_limit=0.0,
            )
            with (
                running_federation(options) as running,
                httpx.Client(
                    base_url=running.url,
                    headers={"Authorization": f"Bearer {running.admin_token}"},
                    timeout=30 * slow,
                ) as client,
            ):
                fed = Fed(running, client, {})
                fed.ready(timeout=60 * slow)
                _run(fed, members, proxy, out, slow)
        finally:
            proxy.close()


def _run(fed: Fed, members: dict[str, MemberProcess], proxy: Proxy, out: Path, slow: float) -> None:
    bodies = [_body(i, out) for i in range(JOBS)]
    answer = fed.client.post("/v1/jobs/batch", json={"jobs": bodies})
    assert answer.status_code == 201, answer.text
    ids = [j["id"] for j in answer.json()["jobs"]]
    # the list of every job is asked for twice a second, not 20 times: each answer costs
    # the federation (in this process) CPU its loop needs to renew the leases
    fed.wait("a third done", lambda: _done(fed, ids) >= JOBS // 3, 180 * slow, 0.5)
    members["c"].kill()
    fed.wait("half done", lambda: _done(fed, ids) >= JOBS // 2, 180 * slow, 0.5)
    proxy.partition()
    fed.wait("b fenced", lambda: fed.states()["b"] == "fenced", 60 * slow)
    proxy.heal()
    fed.wait("every job ended", lambda: _done(fed, ids) == JOBS, 300 * slow, 0.5)
    rows = {
        r["id"]: r for r in fed.client.get("/v1/jobs", params={"all": True, "limit": 10_000}).json()
    }
    states = Counter(rows[i]["state"] for i in ids)
    assert states == {"succeeded": JOBS}, states
    lines = events(out)
    bad = [e for e in lines if e.kind in ("DOUBLE", "QUOTA")]
    assert not bad, bad
    ended = Counter(e.tag for e in lines if e.kind == "end")
    for i, body in enumerate(bodies):
        for t in range(body.get("replicas", 1)):
            assert ended[f"m{i}.{t}"] >= 1, (i, t)
    # the killed member's and the partitioned member's jobs ran again elsewhere
    started = Counter(e.node.split("-", 1)[0] for e in lines if e.kind == "start")
    assert started["a"] and started["b"] and started["c"]
    # b rejoins once healed, as a new incarnation; c stays out while it is down
    fed.wait("b ready again", lambda: fed.states()["b"] == "ready", 60 * slow)
    assert fed.states()["c"] in ("unreachable", "fenced")
    time.sleep(0.5)
    assert not [e for e in events(out) if e.kind in ("DOUBLE", "QUOTA")]
