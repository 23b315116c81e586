"""`hetsched up --executor ray` on a real local Ray cluster (in its own namespaces): a mixed
workload on the nodes and devices hetsched chose, the same outcome as the local executor,
cancel, preemption with a grace, the control plane SIGKILLed and restarted, a raylet killed
under running jobs.

The scenarios run in one body against one service (see ray_bodies_service.py); each test
here checks one of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from ray_fixtures import check

from hetsched.ray.testing import NamespacedCluster


@pytest.fixture(scope="module")
def on_ray(ray_cluster: NamespacedCluster) -> Iterator[dict[str, Any]]:
    value = check(ray_cluster.run("ray_bodies_service:service_on_ray", timeout_s=480))
    assert isinstance(value, dict)
    assert "error" not in value, value["error"]
    yield value


def _scenario(value: dict[str, Any], name: str) -> dict[str, Any]:
    found = value.get(name)
    assert found is not None, f"scenario {name} did not run:\n{value.get('log', '')}"
    assert "error" not in found, f"{found['error']}\n{value.get('log', '')}"
    ok: dict[str, Any] = found["ok"]
    return ok


def _models(nodes: list[dict[str, Any]]) -> dict[str, str]:
    return {d["id"]: d["model"] for n in nodes for d in n["devices"]}


def test_a_mixed_workload_runs_on_the_nodes_and_devices_hetsched_chose(
    on_ray: dict[str, Any],
) -> None:
    w = _scenario(on_ray, "workload")
    assert sorted((r["name"], r["state"], r["exit_code"]) for r in w["listed"]) == [
        ("a100", "succeeded", 0),
        ("cpu", "succeeded", 0),
        ("gang", "succeeded", 0),
        ("t4-half", "succeeded", 0),
    ]
    node_ids, labels = on_ray["node_ids"], {n["name"]: n["labels"] for n in w["nodes"]}
    starts = {(s["job"], s["task"]): s for s in w["starts"]}
    assert len(starts) == len(w["starts"]) == 5  # each task started once
    placed: dict[str, list[tuple[str, list[tuple[str, int]]]]] = {}
    for name, detail in w["details"].items():
        for task in detail["tasks"]:
            seen = starts[(detail["id"], task["task"])]
            devices = [(d["id"], d["share"]) for d in task["devices"]]
            # the task's own environment: the node and the devices hetsched chose
            assert seen["node"] == task["node"]
            assert [(d["id"], d["share"]) for d in seen["devices"]] == devices
            indices = [d["id"].rsplit("gpu", 1)[1] for d in task["devices"]]
            assert seen["cuda"] == ",".join(indices)
            # Ray's own view of the node agent running the task: on that node, with nothing
            # Ray assigned
            view = w["views"][f"{detail['id']}/{task['task']}#1"]
            assert view["node_id"] == node_ids[task["node"]]
            assert view["agent"] == f"agent-{view['node_id']}"
            assert labels[task["node"]]["ray.io/node-id"] == view["node_id"]
            assert (view["assigned"], view["gpu_ids"]) == ({}, [])
            placed.setdefault(name, []).append((task["node"], devices))
    assert placed["cpu"][0][1] == []
    assert [(node, [s for _d, s in devs]) for node, devs in placed["a100"]] == [("a100-0", [1000])]
    assert [(node, [s for _d, s in devs]) for node, devs in placed["t4-half"]] == [("t4-0", [500])]
    # the gang: one whole GPU on each of two nodes, both running at once
    assert sorted(node for node, _devs in placed["gang"]) == ["a100-0", "t4-0"]
    assert all([s for _d, s in devs] == [1000] for _node, devs in placed["gang"])


def test_logs_stream_back_to_hetsched_logs(on_ray: dict[str, Any]) -> None:
    w = _scenario(on_ray, "workload")
    # `hetsched logs -f` followed the A100 job from its start to its end
    assert w["followed"].splitlines() == [
        "--- hetsched: run 1 of task 0 on a100-0 ---",
        "started on a100-0",
        "done",
    ]
    assert "started on t4-0\ndone\n" in w["logs"]


def _shape(w: dict[str, Any]) -> dict[str, Any]:
    """What must not depend on the executor: each job's state, exit code, run and restarts,
    and each task's state, exit code and devices (node and model, share); a task without
    devices may run on any node."""
    models = _models(w["nodes"])
    out: dict[str, Any] = {}
    for row in w["listed"]:
        detail = w["details"][row["name"]]
        # which task of a gang went where is not part of the outcome
        tasks = sorted(
            (
                t["state"],
                t["exit_code"],
                t["node"] if t["devices"] else "*",
                [(models[d["id"]], d["share"]) for d in t["devices"]],
            )
            for t in detail["tasks"]
        )
        out[row["name"]] = [row["state"], row["exit_code"], row["run"], row["restarts"], tasks]
    return out


def test_the_workload_ends_as_it_does_on_the_local_executor(on_ray: dict[str, Any]) -> None:
    on_ray_shape = _shape(_scenario(on_ray, "workload"))
    local_shape = _shape(_scenario(on_ray, "local"))
    assert json.loads(json.dumps(on_ray_shape)) == json.loads(json.dumps(local_shape))
    assert set(on_ray_shape) == {"cpu", "a100", "t4-half", "gang"}


def test_cancel_stops_a_ray_task_with_sigterm(on_ray: dict[str, Any]) -> None:
    c = _scenario(on_ray, "cancel")
    assert c["job"]["state"] == "cancelled"
    [task] = c["job"]["tasks"]
    assert (task["state"], task["exit_code"]) == ("stopped", 143)
    assert "got TERM" in c["log"]


def test_preemption_gives_the_victim_its_grace(on_ray: dict[str, Any]) -> None:
    p = _scenario(on_ray, "preemption")
    # the high-priority job started only after the low one had ended, and the low one ran
    # again afterwards
    assert p["order"] == [["low", 1], ["high", 1], ["low", 2]]
    assert (p["high"]["state"], p["low"]["state"]) == ("succeeded", "succeeded")
    assert (p["low"]["run"], p["low"]["preemptions"]) == (2, 1)
    first = next(t for t in p["low"]["tasks"] if t["run"] == 1)
    # SIGTERM, then it ended by itself within its grace (not SIGKILL)
    assert (first["state"], first["exit_code"]) == ("stopped", 0)
    assert "got TERM\nbye\n" in p["low_log"]
    assert any("preempt" in h["cause"] for h in p["why"]["history"])


def test_a_control_plane_killed_and_restarted_loses_and_repeats_nothing(
    on_ray: dict[str, Any],
) -> None:
    c = _scenario(on_ray, "crash")
    assert c["pending_at_crash"] == ["waits", "waits-2"]
    # every job started exactly once: nothing lost, nothing run twice
    assert c["starts"] == {name: 1 for name in c["jobs"]}
    assert c["other_runs"] == []
    outcome = {
        name: (
            j["state"],
            j["exit_code"],
            j["run"],
            [(t["state"], t["exit_code"]) for t in j["tasks"]],
        )
        for name, j in c["jobs"].items()
    }
    assert outcome == {
        "done": ("succeeded", 0, 1, [("exited", 0)]),
        "ends-while-down": ("failed", 3, 1, [("exited", 3)]),
        "runs-on": ("succeeded", 0, 1, [("exited", 0)]),
        "runs-on-2": ("failed", 4, 1, [("exited", 4)]),
        "waits": ("succeeded", 0, 1, [("exited", 0)]),
        "waits-2": ("succeeded", 0, 1, [("exited", 0)]),
    }


def test_notice_checkpoint_and_resume_on_ray(on_ray: dict[str, Any]) -> None:
    r = _scenario(on_ray, "resume")
    log = r["log"]
    # run 1 was told how to report (the advertised API, its token) and the notice signal
    assert "run 1 resume=none step=none" in log
    assert "signal=SIGUSR1 api=yes token=yes" in log
    # the notice came from the node's agent; the task reported through the API
    assert "notice" in log.split("run 1 ", 1)[1]
    assert "progress reported: 7 steps" in log
    # (`hetsched checkpoint` may not get to say so: the report ends the notice, and the
    # SIGTERM that follows reaches the task's whole group, the command included; the job's
    # checkpoint below is the report)
    assert "got TERM" in log
    # the report ended the 30 s notice: the high-priority job started well before it
    assert r["high_started_s"] < 20, r
    # run 2 resumed from the checkpoint run 1 reported
    assert "run 2 resume=/ckpt/7 step=7" in log
    low, high = r["low"], r["high"]
    assert (low["state"], low["run"], high["state"]) == ("succeeded", 2, "succeeded")
    assert low["checkpoint"]["step"] == 7 and low["checkpoint"]["path"] == "/ckpt/7"
    assert low["preemptions"] == 1


def test_the_overcommit_guard_runs_in_the_node_agent(on_ray: dict[str, Any]) -> None:
    g = _scenario(on_ray, "guard")
    hog = g["hog"]
    assert hog["state"] == "failed"
    assert "killed by the overcommit guard" in hog["reason"], hog
    (alert,) = [a for a in g["alerts"] if a["job_id"] == hog["id"]]
    assert alert["kind"] == "task_memory" and alert["killed"] == f"{hog['id']}/0#1"
    assert alert["node"] == hog["tasks"][0]["node"] and alert["limit"] == 128
    assert f"overcommit guard: {alert['message']}" in g["causes"]
    # the guaranteed task next to it ran on and ended by itself
    assert g["calm_then"] == "running"
    assert (g["calm"]["state"], g["calm"]["run"]) == ("succeeded", 1)


def test_a_gpu_unplugged_on_a_ray_node_requeues_its_job_within_3_s(
    on_ray: dict[str, Any],
) -> None:
    h = _scenario(on_ray, "hotplug")
    # seen by the node's own agent (its fake device file), not by Ray's resources
    assert (h["first"]["node"], h["first"]["cuda"]) == ("h100-plug", "0")
    assert h["requeued_s"] < 3.0, h
    assert h["device_unplugged"] == [False, "removed"]
    assert "device h100-plug/gpu0 removed" in h["causes"][-1], h["causes"]
    # plugged back: the job runs there again and ends
    assert (h["second"]["node"], h["second"]["run"]) == ("h100-plug", 2)
    assert h["device_after"] == [True, ""]
    assert (h["job"]["state"], h["job"]["run"]) == ("succeeded", 2)


def test_a_raylet_killed_requeues_its_jobs_or_fails_them_by_policy(
    on_ray: dict[str, Any],
) -> None:
    r = _scenario(on_ray, "raylet")
    assert (r["first_node"], r["second_node"]) == ("h100-svc", "a100-0")
    assert [(d["model"], d["share"]) for d in r["second_devices"]] == [("A100", 1000)]
    moves, fails = r["moves"], r["fails"]
    assert (moves["state"], moves["run"]) == ("succeeded", 2)
    lost = next(t for t in moves["tasks"] if t["run"] == 1)
    assert lost["node"] == "h100-svc" and lost["state"] in {"stopped", "lost"}
    causes = [h["cause"] for h in r["why"]["history"]]
    assert any(c.startswith("Ray node died") and c.endswith(": h100-svc") for c in causes), causes
    assert fails["state"] == "failed"
    assert fails["reason"].startswith("Ray node died") and "h100-svc" in fails["reason"]
    assert fails["reason"].endswith("fails by its policy")
