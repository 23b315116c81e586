"""Failover without double runs: members as real `hetsched up` processes on 127.0.0.1, one
SIGKILLed, one behind a proxy that drops its traffic, and the federation itself SIGKILLed.

What ran where, and that no task of a job ran twice at the same time, is read from the
tasks' own output (``fed_fixtures.task``: a lock per task that the kernel drops when its
process dies, and start/end lines with the node).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
from fed_fixtures import Fed, Line, events, job_body, load_factor, members_yaml, task
from procs import FederationProcess, MemberProcess, Proxy

from hetsched.federation.server import FederationOptions
from hetsched.federation.testing import running_federation

pytestmark = pytest.mark.slow

LEASE = 3.0
GPU = {"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "count": 1}]}


@contextmanager
def processes(
    tmp: Path, names: str = "abc", timeout: float = 90.0
) -> Iterator[dict[str, MemberProcess]]:
    with ExitStack() as stack:
        members = {}
        for name in names:
            member = MemberProcess(tmp, name)
            stack.callback(member.stop)
            member.launch()
            members[name] = member
        for member in members.values():
            member.wait(timeout)
        yield members


@contextmanager
def federation_over(tmp: Path, urls: dict[str, str], tokens: dict[str, str]) -> Iterator[Fed]:
    """A federation over the members at ``urls``; its lease, call timeout and fencing
    margin, and the returned Fed's waits, scaled by the machine's load (``load_factor``,
    as test_many explains: a short lease lapses for want of CPU on a busy machine)."""
    slow = load_factor()
    path = members_yaml(tmp, urls, tokens, LEASE * slow, timeout=2.0 * slow, margin=0.5 * slow)
    options = FederationOptions(members=path, home=tmp / "federation", rate_limit=0.0)
    with (
        running_federation(options) as fed,
        httpx.Client(
            base_url=fed.url,
            headers={"Authorization": f"Bearer {fed.admin_token}"},
            timeout=30 * slow,
        ) as client,
    ):
        yield Fed(fed, client, {}, slow)


def _member(line: Line) -> str:
    return line.node.split("-", 1)[0]


def _check_runs(lines: list[Line], tags: list[str]) -> dict[str, list[str]]:
    """No task ran twice at once, and every task ended once on some member; returns the
    members each task started on, in order."""
    assert not [e for e in lines if e.kind == "DOUBLE"], [e for e in lines if e.kind == "DOUBLE"]
    starts: dict[str, list[str]] = {}
    for line in lines:
        if line.kind == "start":
            starts.setdefault(line.tag, []).append(_member(line))
    ends = [e.tag for e in lines if e.kind == "end"]
    for tag in tags:
        assert ends.count(f"{tag}.0") == 1, (tag, starts.get(f"{tag}.0"), ends.count(f"{tag}.0"))
    return starts


def _started(out: Path, tags: list[str]) -> bool:
    """Every task of ``tags`` has written its start line (it runs on its member: a job the
    federation has bound to a member may not have reached it yet)."""
    return {f"{t}.0" for t in tags} <= {e.tag for e in events(out) if e.kind == "start"}


def _submit(
    fed: Fed, out: Path, prefix: str, count: int, seconds: float, gate: Path | None = None
) -> dict[str, str]:
    bodies = [
        job_body(
            f"{prefix}-{i}", command=task(out, f"{prefix}{i}", seconds, gate=gate), resources=GPU
        )
        for i in range(count)
    ]
    answer = fed.client.post("/v1/jobs/batch", json={"jobs": bodies})
    assert answer.status_code == 201, answer.text
    return {f"{prefix}{i}": j["id"] for i, j in enumerate(answer.json()["jobs"])}


def test_a_killed_member_is_fenced_and_its_jobs_finish_elsewhere_once(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with processes(tmp_path) as members:
        urls = {n: m.url for n, m in members.items()}
        with federation_over(tmp_path, urls, {n: m.token for n, m in members.items()}) as fed:
            fed.ready(timeout=60)
            # the tasks run until the gate opens, which is after c is fenced: one of c's
            # tasks that outlived the fence would then end too, and be caught
            ids = _submit(fed, out, "k", 8, seconds=0.5, gate=out / "go")
            fed.wait("all eight started", lambda: _started(out, list(ids)), 60)
            on_c = [t for t, i in ids.items() if fed.job(i)["tasks"][-1]["node"] == "c"]
            assert len(on_c) == 2
            killed_at = time.time()
            members["c"].kill()
            fed.wait("c fenced", lambda: fed.states()["c"] == "fenced", 60)
            nodes = {n["name"]: n for n in fed.client.get("/v1/nodes").json()}
            assert nodes["c"]["labels"]["hetsched.io/member-state"] == "fenced", nodes["c"]
            assert nodes["c"]["member"]["state"] == "fenced" and not nodes["c"]["active"]
            (out / "go").touch()
            for job_id in ids.values():
                assert (
                    fed.until(job_id, {"succeeded", "failed"}, timeout=90)["state"] == "succeeded"
                )
            starts = _check_runs(events(out), list(ids))
            for tag in on_c:
                # started on c, killed there by its own watchdog, then run again elsewhere
                assert starts[f"{tag}.0"][0] == "c" and starts[f"{tag}.0"][-1] != "c"
                why = fed.client.get(f"/v1/jobs/{ids[tag]}/why").json()
                causes = [h["cause"] for h in why["history"]]
                # which member fenced it, and the lease it lost there
                assert any("member c fenced" in c and "(incarnation 1" in c for c in causes), why
            # the requeued copies started only after c's tasks had surely died
            again = [
                e.at
                for e in events(out)
                if e.kind == "start" and e.tag.split(".")[0] in on_c and _member(e) != "c"
            ]
            assert min(again) > killed_at
            # c comes back: it does not start what it stopped, and rejoins as a new incarnation
            members["c"].start()
            fed.wait("c ready again", lambda: fed.states()["c"] == "ready", 60)
            incarnation = {
                m["name"]: m["incarnation"] for m in fed.running.built.runner.members_view
            }
            assert incarnation["c"] == 2
            time.sleep(1.0)
            starts = _check_runs(events(out), list(ids))
            assert all(starts[f"{tag}.0"].count("c") == 1 for tag in on_c)


def test_a_partitioned_member_stops_its_jobs_and_rejoins_when_healed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with processes(tmp_path) as members:
        proxy = Proxy(members["b"].port)
        try:
            urls = {n: (proxy.url if n == "b" else m.url) for n, m in members.items()}
            tokens = {n: m.token for n, m in members.items()}
            with federation_over(tmp_path, urls, tokens) as fed:
                fed.ready(timeout=60)
                # the tasks run until the gate opens, after b is fenced: b must have
                # stopped its own, and a run of them elsewhere is then the only one
                ids = _submit(fed, out, "p", 8, seconds=0.5, gate=out / "go")
                fed.wait("all started", lambda: _started(out, list(ids)), 60)
                on_b = [t for t, i in ids.items() if fed.job(i)["tasks"][-1]["node"] == "b"]
                assert len(on_b) == 4
                proxy.partition()
                fed.wait(
                    "b unreachable", lambda: fed.states()["b"] in ("unreachable", "fenced"), 30
                )
                fed.wait("b fenced", lambda: fed.states()["b"] == "fenced", 60)
                # b, alive all along, cancelled its jobs when its lease lapsed
                b_jobs = httpx.get(
                    f"{members['b'].url}/v1/jobs",
                    params={"all": True},
                    headers={"Authorization": f"Bearer {members['b'].token}"},
                ).json()
                assert {j["state"] for j in b_jobs if j["name"].startswith("p-")} == {"cancelled"}
                (out / "go").touch()
                for job_id in ids.values():
                    assert (
                        fed.until(job_id, {"succeeded", "failed"}, timeout=90)["state"]
                        == "succeeded"
                    )
                proxy.heal()
                fed.wait("b ready again", lambda: fed.states()["b"] == "ready", 60)
                more = _submit(fed, out, "h", 4, seconds=0.5)
                for job_id in more.values():
                    assert (
                        fed.until(job_id, {"succeeded", "failed"}, timeout=60)["state"]
                        == "succeeded"
                    )
                starts = _check_runs(events(out), [*ids, *more])
                for tag in on_b:
                    assert starts[f"{tag}.0"][0] == "b" and starts[f"{tag}.0"][-1] != "b"
        finally:
            proxy.close()


def _federation_client(federation: FederationProcess) -> Fed:
    client = httpx.Client(
        base_url=federation.url,
        headers={"Authorization": f"Bearer {federation.token}"},
        timeout=30,
    )
    fed = Fed(None, client, {})  # type: ignore[arg-type]

    def ready() -> bool:
        nodes = client.get("/v1/nodes").json()
        return [n["labels"]["hetsched.io/member-state"] for n in nodes] == ["ready", "ready"]

    fed.wait("members ready", ready, 90)
    return fed


def test_a_federation_killed_and_restarted_takes_its_jobs_back(tmp_path: Path) -> None:
    """SIGKILLed and restarted within its lease, a federation finds its jobs running and
    lets them finish (each ran once); SIGKILLed for longer than its lease, its members stop
    its jobs, and restarted it runs them again, never twice at once. Two federations on the
    same members, with a long and a short lease; the tasks wait for a gate file, so what
    runs when does not depend on timing."""
    out = tmp_path / "out"
    out.mkdir()
    with processes(tmp_path, "ab") as members:
        urls = {n: m.url for n, m in members.items()}
        tokens = {n: m.token for n, m in members.items()}
        long = members_yaml(tmp_path, urls, tokens, 40.0, name="long")
        short = members_yaml(tmp_path, urls, tokens, LEASE, name="short")
        one, two = (
            FederationProcess(tmp_path, long, "long"),
            FederationProcess(tmp_path, short, "short"),
        )
        try:
            one.launch()
            two.launch()
            one.wait()
            two.wait()
            fed, other = _federation_client(one), _federation_client(two)
            first = _submit(fed, out, "r", 3, seconds=0.2, gate=out / "go-r")
            second = _submit(other, out, "s", 3, seconds=0.2, gate=out / "go-s")
            for f, ids in ((fed, first), (other, second)):
                f.wait(
                    "running",
                    lambda f=f, ids=ids: all(f.job(i)["state"] == "running" for i in ids.values()),
                    60,
                )
            # "running" says a member took the job; its task may not have started yet
            fed.wait("every task started", lambda: _started(out, [*first, *second]), 60)
            one.kill()
            two.kill()
            one.start()  # within its lease: the members keep its jobs
            # the short lease lapses: the members stop its jobs, which were still waiting
            for member in members.values():
                fed.wait(
                    "the short federation's jobs stopped",
                    lambda m=member: all(
                        j["state"] == "cancelled"
                        for j in httpx.get(
                            f"{m.url}/v1/jobs",
                            params={"all": True},
                            headers={"Authorization": f"Bearer {m.token}"},
                        ).json()
                        if j["name"].startswith("s-")
                    ),
                    60,
                )
            (out / "go-r").touch()
            (out / "go-s").touch()
            two.start()
            for f, ids in ((fed, first), (other, second)):
                for job_id in ids.values():
                    assert (
                        f.until(job_id, {"succeeded", "failed"}, timeout=90)["state"] == "succeeded"
                    )
            starts = _check_runs(events(out), [*first, *second])
            assert all(len(starts[f"{t}.0"]) == 1 for t in first), starts
            assert all(len(starts[f"{t}.0"]) == 2 for t in second), starts
            fed.client.close()
            other.client.close()
        finally:
            one.stop()
            two.stop()
