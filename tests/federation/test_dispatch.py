"""Dispatch through the federation's core, against three real `hetsched up` members on
127.0.0.1: a (2x A100), b (4x V100), c (2x T4).

Where each task ran is read from the tasks' own output (their node: ``<member>-node``).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from fed_fixtures import Line, events, federation, job_body, task

from pg_fixture import new_database

GPU = {"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "count": 1}]}


def _member(node: str) -> str:
    return node.split("-", 1)[0]


def test_jobs_run_on_members_and_the_api_is_hetsched_ups(tmp_path: Path) -> None:
    with federation(tmp_path) as fed:
        fed.ready()
        body = job_body(command=["sh", "-c", "echo hi from $HETSCHED_NODE"], resources=GPU)
        answer = fed.client.post("/v1/jobs", json=body)
        assert answer.status_code == 201, answer.text
        job_id = answer.json()["id"]
        job = fed.until(job_id, {"succeeded", "failed"})
        assert job["state"] == "succeeded", job
        [task_row] = job["tasks"]
        assert task_row["node"] in {"a", "b", "c"}
        log = fed.client.get(f"/v1/jobs/{job_id}/logs").json()
        assert f"hi from {task_row['node']}-node" in log["data"]
        why = fed.client.get(f"/v1/jobs/{job_id}/why").json()
        assert [h["to"] for h in why["history"]] == ["pending", "running", "succeeded"]
        nodes = {n["name"]: n for n in fed.client.get("/v1/nodes").json()}
        assert set(nodes) == {"a", "b", "c"}
        assert nodes["b"]["labels"]["hetsched.io/member-state"] == "ready"
        assert sum(1 for d in nodes["b"]["devices"] if d["model"] == "V100") == 4


def test_dispatch_by_capacity_fills_every_member_and_no_more(tmp_path: Path) -> None:
    """Eight one-GPU jobs on 2 + 4 + 2 GPUs start at once, each member holding as many as
    it has GPUs; a ninth waits, and starts when one ends."""
    out = tmp_path / "out"
    out.mkdir()
    with federation(tmp_path) as fed:
        fed.ready()
        bodies = [
            job_body(f"cap-{i}", command=task(out, f"cap{i}", seconds=3), resources=GPU)
            for i in range(9)
        ]
        answer = fed.client.post("/v1/jobs/batch", json={"jobs": bodies})
        assert answer.status_code == 201, answer.text
        ids = [j["id"] for j in answer.json()["jobs"]]
        fed.wait("eight running", lambda: sum(fed.job(i)["state"] == "running" for i in ids) == 8)
        running = [fed.job(i) for i in ids if fed.job(i)["state"] == "running"]
        assert Counter(j["tasks"][-1]["node"] for j in running) == {"a": 2, "b": 4, "c": 2}
        waiting = [i for i in ids if fed.job(i)["state"] == "pending"]
        assert len(waiting) == 1
        why = fed.client.get(f"/v1/jobs/{waiting[0]}/why").json()
        lines = [r["reason"] for r in why["explanation"]["rejections"]]
        assert sorted(lines) == sorted(
            f"member {m}: insufficient free gpu (want 1x gpu)" for m in "abc"
        ), lines
        # each member's own what-if: it would fit there once a running job ends
        said = fed.wait(
            "the members' own answers",
            lambda: [
                r
                for r in fed.client.get(f"/v1/jobs/{waiting[0]}/why").json()["explanation"][
                    "reasons"
                ]
                if r.startswith("member ")
            ],
            20,
        )
        assert all(" says: would fit in " in r for r in said), said
        for job_id in ids:
            assert fed.until(job_id, {"succeeded", "failed"}, timeout=40)["state"] == "succeeded"
    assert not [e for e in events(out) if e.kind == "DOUBLE"]


def test_dispatch_by_speed_goes_where_the_model_is_fastest_while_it_has_room(
    tmp_path: Path,
) -> None:
    """A job type three times faster on a's A100 goes to a while a has room; the third
    goes elsewhere (a is full), and a job that says nothing of speed is free to go anywhere."""
    out = tmp_path / "out"
    out.mkdir()
    speed = {"A100": 3.0, "V100": 1.0, "T4": 1.0}
    with federation(tmp_path) as fed:
        fed.ready()
        ids = []
        for i in range(3):
            body = job_body(
                f"fast-{i}", command=task(out, f"fast{i}", seconds=4), resources=GPU, speed=speed
            )
            ids.append(fed.client.post("/v1/jobs", json=body).json()["id"])
            fed.until(ids[-1], {"running"})
        nodes = [fed.job(i)["tasks"][-1]["node"] for i in ids]
        assert nodes[:2] == ["a", "a"], nodes
        assert nodes[2] in {"b", "c"}
        for job_id in ids:
            assert fed.until(job_id, {"succeeded", "failed"})["state"] == "succeeded"
    started = {e.tag: _member(e.node) for e in events(out) if e.kind == "start"}
    assert started["fast0.0"] == started["fast1.0"] == "a"


def test_labels_pins_and_members_that_could_never_hold_a_job(tmp_path: Path) -> None:
    with federation(tmp_path) as fed:
        fed.ready()
        by_label = job_body(resources={**GPU, "node_selector": {"region": "r-c"}})
        pinned = job_body(resources={**GPU, "node_selector": {"hetsched.io/member": "b"}})
        three = job_body(
            resources={"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "count": 3}]}
        )
        placed = {}
        for name, body in {"label": by_label, "pin": pinned, "three": three}.items():
            answer = fed.client.post("/v1/jobs", json=body)
            assert answer.status_code == 201, answer.text
            placed[name] = fed.until(answer.json()["id"], {"succeeded"})["tasks"][-1]["node"]
        # only b has three GPUs on one node
        assert placed == {"label": "c", "pin": "b", "three": "b"}
        # five GPUs on one node: no member could ever hold it, and each one says why
        five = job_body(
            resources={"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "count": 5}]}
        )
        refused = fed.client.post("/v1/jobs", json=five)
        assert refused.status_code == 422, refused.text
        text = refused.text
        assert all(f"member {m}:" in text for m in "abc"), text


def _most_at_once(lines: list[Line], prefix: str) -> int:
    """The most tasks whose tag starts with ``prefix`` running at the same time."""
    points = sorted(
        (e.at, 1 if e.kind == "start" else -1)
        for e in lines
        if e.tag.startswith(prefix) and e.kind in ("start", "end")
    )
    most = now = 0
    for _, step in points:
        now += step
        most = max(most, now)
    return most


def test_a_quota_holds_across_the_whole_federation(tmp_path: Path) -> None:
    """team-a may hold 2 GPUs in all (its nominal quota, no borrowing) though the members
    have 8: its jobs run two at a time, whichever members they land on, and the tasks
    themselves find a free quota slot every time."""
    profile = tmp_path / "profile.yaml"
    profile.write_text(
        "name: fed\n"
        "flavors: [gpu]\n"
        "queues:\n"
        "  - {name: default}\n"
        "  - {name: team-a, nominal: {gpu: 2}, borrowing_limit: {gpu: 0}}\n"
    )
    queues = tmp_path / "queues.yaml"
    queues.write_text("queues:\n  - {name: default}\n  - {name: team-a}\n")
    out = tmp_path / "out"
    out.mkdir()
    with federation(tmp_path, profile=profile, queues=queues) as fed:
        fed.ready()
        bodies = [
            job_body(
                f"q-{i}",
                queue="team-a",
                command=task(out, f"q{i}", seconds=1.5, slots=1, slot_count=2),
                resources=GPU,
            )
            for i in range(6)
        ]
        ids = [
            j["id"] for j in fed.client.post("/v1/jobs/batch", json={"jobs": bodies}).json()["jobs"]
        ]
        fed.wait("two running", lambda: sum(fed.job(i)["state"] == "running" for i in ids) == 2)
        waiting = next(i for i in ids if fed.job(i)["state"] == "pending")
        why = fed.client.get(f"/v1/jobs/{waiting}/why").json()
        assert "quota: queue team-a gpu" in str(why["explanation"]), why
        for job_id in ids:
            done = fed.until(job_id, {"succeeded", "failed"}, timeout=60)
            assert done["state"] == "succeeded", (done["reason"], done["tasks"])
        queues_view = {q["name"]: q for q in fed.client.get("/v1/queues").json()}
        assert queues_view["team-a"]["resources"]["gpu"]["quota"] == 2
    lines = events(out)
    assert not [e for e in lines if e.kind in ("QUOTA", "DOUBLE")], lines
    assert _most_at_once(lines, "q") == 2


def test_the_cli_works_against_a_federation_unchanged(tmp_path: Path) -> None:
    """submit, jobs, job, why, logs, cancel, nodes: the commands `hetsched up` users know."""
    from typer.testing import CliRunner

    from hetsched.cli.main import app

    with federation(tmp_path) as fed:
        fed.ready()
        env = {"HETSCHED_URL": fed.running.url, "HETSCHED_TOKEN": fed.running.admin_token}
        runner = CliRunner()

        def cli(*args: str) -> str:
            result = runner.invoke(app, list(args), env=env)
            assert result.exit_code == 0, result.output
            return result.output

        out = cli(
            "submit", "-o", "json", "--gpu", "1", "--", "sh", "-c", "echo from $HETSCHED_NODE"
        )
        job_id = json.loads(out)[0]["id"]
        fed.until(job_id, {"succeeded"})
        assert job_id in cli("jobs", "--all")
        assert "succeeded" in cli("why", job_id)
        assert "from " in cli("logs", job_id)
        assert "Tasks" in cli("job", job_id)
        nodes = cli("nodes")
        assert all(f"{m} (ready)" in nodes for m in "abc"), nodes
        member = json.loads(cli("nodes", "-o", "json"))[0]["member"]
        assert member["state"] == "ready" and member["incarnation"] == 1
        long = json.loads(cli("submit", "-o", "json", "--", "sleep", "30"))[0]["id"]
        fed.until(long, {"running"})
        cli("cancel", long)
        assert fed.until(long, {"cancelled"})["state"] == "cancelled"


def test_the_federations_store_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    """The same store as `hetsched up`'s, on PostgreSQL (a database of its own): a job
    runs, and the store holds it, its history and its dispatch to a member."""
    from hetsched.controlplane.storage.store import Store

    url = new_database(postgres_url, "f")
    with federation(tmp_path, db=url) as fed:
        fed.ready()
        job_id = fed.client.post("/v1/jobs", json=job_body(resources=GPU)).json()["id"]
        assert fed.until(job_id, {"succeeded", "failed"})["state"] == "succeeded"
    store = Store(url)
    try:
        assert store.job(job_id)["state"] == "succeeded"  # type: ignore[index]
        [dispatch] = store.job_tasks(job_id)
        assert dispatch["node"] in {"a", "b", "c"} and dispatch["placement"]["member_job"]
        assert [t["target"] for t in store.job_transitions(job_id)] == [
            "pending",
            "running",
            "succeeded",
        ]
    finally:
        store.close()
