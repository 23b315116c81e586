"""Bodies of the `hetsched up --executor ray` tests: a real `hetsched up` process inside the
namespace, next to the local Ray cluster, driven through its API and its CLI.

One body runs every scenario against one service (starting the service and connecting to
Ray is most of the cost); each scenario's findings, or its traceback, come back under its
own key, and each test asserts one scenario.
"""

from __future__ import annotations

import json
import subprocess
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray_bodies_resume import notice_and_resume, overcommit
from ray_service import HETSCHED, Up, job, read_starts

from hetsched.ray import _api
from hetsched.ray.local import LocalCluster, LocalNodeSpec
from hetsched.ray.testing import ClusterInfo, kill_raylet

#: priority order, preemption with a grace of 3 s, the overcommit guard killing best-effort
#: tasks over their memory request
PROFILE = """
name: ray-tests
queue_sort: {name: priority, args: {mode: best_effort}}
prefilter: [fit]
filter: [fit, node-selector, taints]
score: [{name: bestfit, weight: 1}]
post_filter: [{name: preemption, args: {grace_s: 3, priority: true}}]
guard: {interval_s: 0.5, node_memory_threshold: 1.0, kill_best_effort: true}
"""

#: the local executor's equivalent of the session cluster's a100-0 and t4-0 (cpu-0 is this
#: machine itself, named so)
LOCAL_CLUSTER = """
nodes:
  - {name: a100-0, cpu: "4", memory: 8Gi,
     devices: [{class: gpu, vendor: nvidia, model: A100, count: 2}]}
  - {name: t4-0, cpu: "4", memory: 8Gi,
     devices: [{class: gpu, vendor: nvidia, model: T4, count: 1}]}
"""


def _gpu(model: str | None = None, share: int | None = None, **extra: Any) -> dict[str, Any]:
    device: dict[str, Any] = {"class": "gpu", "count": 1, **extra}
    if model is not None:
        device["model"] = model
    if share is not None:
        device["share"] = share
    return device


def workload(scratch: Path) -> list[dict[str, Any]]:
    """The mixed workload: CPU only, a whole A100, half a T4, a gang of two tasks that
    cannot share a node (3 CPUs each on 4-CPU nodes) and need a whole GPU each."""
    return [
        job("cpu", scratch, {"cpu": "1", "memory": "1Gi"}),
        job("a100", scratch, {"cpu": "1", "memory": "1Gi", "devices": [_gpu("A100")]}),
        job("t4-half", scratch, {"cpu": "1", "memory": "1Gi", "devices": [_gpu("T4", 500)]}),
        job(
            "gang",
            scratch,
            {"cpu": "3", "memory": "1Gi", "devices": [_gpu()]},
            replicas=2,
            gang=2,
        ),
    ]


def _release(scratch: Path, job_id: str, task: int = 0) -> None:
    release = scratch / "release"
    release.mkdir(exist_ok=True)
    (release / f"{job_id}.{task}").touch()


def _started(scratch: Path, job_id: str, run: int = 1) -> list[dict[str, Any]]:
    return [s for s in read_starts(scratch) if s["job"] == job_id and s["run"] == run]


def _wait_started(
    up: Up, scratch: Path, job_id: str, run: int = 1, tasks: int = 1, timeout_s: float = 90
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        starts = _started(scratch, job_id, run)
        if len(starts) >= tasks:
            return starts
        if time.monotonic() > deadline:
            state = up.job(job_id)
            raise AssertionError(f"{job_id} run {run}: not started in {timeout_s} s: {state}")
        time.sleep(0.1)


def _ray_view(instance: str, key: str) -> dict[str, Any]:
    """Where Ray says the node agent that runs the task is, asked of the agent itself (its
    runtime context), and what Ray assigned it."""
    import ray

    namespace = f"hetsched-{instance}"
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] != namespace:
            continue
        agent = ray.get_actor(entry["name"], namespace=namespace)
        if key in ray.get(agent.tasks.remote(), timeout=60):
            view: dict[str, Any] = ray.get(agent.ray_view.remote(), timeout=60)
            view["agent"] = entry["name"]
            return view
    raise AssertionError(f"no node agent runs {key}")


def run_workload(up: Up, scratch: Path, on_ray: bool) -> dict[str, Any]:
    """Submit the workload, look at each task while it runs (its start line, and Ray's view
    of its actor on Ray), release it, and collect the outcome as `hetsched` reports it."""
    ids = {body["name"]: up.submit(body) for body in workload(scratch)}
    # follows the A100 job's output until the job ends
    follow = subprocess.Popen(
        [HETSCHED, "logs", "-f", ids["a100"]],
        env=up.cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    views: dict[str, dict[str, Any]] = {}
    released: set[str] = set()
    deadline = time.monotonic() + 150
    while len(released) < len(ids):
        assert time.monotonic() < deadline, {n: up.job(i)["state"] for n, i in ids.items()}
        for name, job_id in ids.items():
            if job_id in released:
                continue
            starts = _started(scratch, job_id)
            replicas = 2 if name == "gang" else 1
            if len(starts) < replicas:
                continue
            if on_ray:
                for start in starts:
                    key = f"{job_id}/{start['task']}#1"
                    views[key] = _ray_view(up.instance, key)
            for task in range(replicas):
                _release(scratch, job_id, task)
            released.add(job_id)
        time.sleep(0.1)
    up.wait(ids.values(), {"succeeded", "failed"}, timeout_s=90)
    listed = json.loads(up.cli("jobs", "--all", "-o", "json"))
    details = {
        name: json.loads(up.cli("job", job_id, "-o", "json")) for name, job_id in ids.items()
    }
    followed, _ = follow.communicate(timeout=60)
    return {
        "ids": ids,
        "listed": [row for row in listed if row["id"] in ids.values()],
        "details": details,
        "starts": [s for s in read_starts(scratch) if s["job"] in ids.values()],
        "views": views,
        "nodes": up.api().get("/v1/nodes").json(),
        "followed": followed.decode(errors="replace"),
        "logs": up.cli("logs", ids["t4-half"]),
    }


def cancel(up: Up, scratch: Path) -> dict[str, Any]:
    """A running task cancelled through `hetsched cancel`: SIGTERM to its group through its
    Ray actor; it says so and exits 143."""
    job_id = up.submit(
        job("cancel-me", scratch, {"cpu": "1", "memory": "1Gi"}, env={"TERM_EXIT": "143"})
    )
    _wait_started(up, scratch, job_id)
    up.cli("cancel", job_id)
    up.wait([job_id], {"cancelled", "failed", "succeeded"})
    # the job is cancelled at once; its task stays `stopping` until its exit is reported
    deadline = time.monotonic() + 60.0
    while (done := up.job(job_id))["tasks"][-1]["state"] == "stopping":
        assert time.monotonic() < deadline, f"task still stopping after 60 s: {done}"
        time.sleep(0.2)
    return {"job": done, "log": up.cli("logs", job_id)}


def preemption(up: Up, scratch: Path) -> dict[str, Any]:
    """A low-priority job holding both A100s is preempted by a high-priority one: SIGTERM,
    and it ends by itself within its grace (3 s); the high one runs, then the low one again."""
    low = up.submit(
        job(
            "low",
            scratch,
            {"cpu": "1", "memory": "1Gi", "devices": [{**_gpu("A100"), "count": 2}]},
            priority=0,
            preemptible=True,
            env={"TERM_DELAY": "1", "TERM_EXIT": "0"},
        )
    )
    _wait_started(up, scratch, low)
    high = up.submit(
        job(
            "high",
            scratch,
            {"cpu": "1", "memory": "1Gi", "devices": [{**_gpu("A100"), "count": 2}]},
            priority=100,
        )
    )
    _wait_started(up, scratch, high)
    _release(scratch, high)
    _wait_started(up, scratch, low, run=2)
    _release(scratch, low)
    jobs = up.wait([low, high], {"succeeded", "failed"})
    order = [(s["job"], s["run"]) for s in read_starts(scratch) if s["job"] in (low, high)]
    return {
        "low": jobs[low],
        "high": jobs[high],
        "order": [("low" if j == low else "high", run) for j, run in order],
        "low_log": up.cli("logs", low),
        "why": up.api().get(f"/v1/jobs/{low}/why").json(),
    }


def control_plane_crash(up: Up, scratch: Path) -> dict[str, Any]:
    """`hetsched up` SIGKILLed with tasks running, ending and pending; restarted on the same
    home: every job runs once, and every exit code is recorded once."""
    cpu3 = {"cpu": "3", "memory": "1Gi"}
    names = ["done", "ends-while-down", "runs-on", "runs-on-2", "waits", "waits-2"]
    codes = {"done": 0, "ends-while-down": 3, "runs-on": 0, "runs-on-2": 4}
    ids = {
        name: up.submit(job(f"crash-{name}", scratch, cpu3, env={"EXIT": str(codes.get(name, 0))}))
        for name in names
    }
    # 3 CPUs each on three 4-CPU nodes: three run at a time
    _wait_started(up, scratch, ids["done"])
    _release(scratch, ids["done"])
    up.wait([ids["done"]], {"succeeded"})
    for name in ("ends-while-down", "runs-on", "runs-on-2"):
        _wait_started(up, scratch, ids[name])
    pending_at_crash = [n for n, i in ids.items() if up.job(i)["state"] == "pending"]
    up.kill()
    _release(scratch, ids["ends-while-down"])
    time.sleep(1.5)
    up.start()
    for name in ("runs-on", "runs-on-2"):
        _release(scratch, ids[name])
    for name in ("waits", "waits-2"):
        _wait_started(up, scratch, ids[name])
        _release(scratch, ids[name])
    jobs = up.wait(ids.values(), {"succeeded", "failed", "cancelled"})
    starts = [(s["job"], s["task"], s["run"]) for s in read_starts(scratch)]
    return {
        "pending_at_crash": pending_at_crash,
        "jobs": {name: jobs[job_id] for name, job_id in ids.items()},
        "starts": {name: starts.count((job_id, 0, 1)) for name, job_id in ids.items()},
        "other_runs": [s for s in starts if s[0] in ids.values() and s[2] != 1],
    }


def raylet_dies(up: Up, scratch: Path, cluster: ClusterInfo) -> dict[str, Any]:
    """A node joins; two jobs share its GPU; its raylet is SIGKILLed: the job that may run
    elsewhere (A100 as its alternative) is requeued and finishes on a100-0, the one whose
    policy says fail fails; both say which node died."""
    extra = LocalCluster([LocalNodeSpec("h100-svc", "H100", 1)], join=cluster.address)
    extra.start()
    try:
        deadline = time.monotonic() + 60
        while "h100-svc" not in {n["name"] for n in up.api().get("/v1/nodes").json()}:
            assert time.monotonic() < deadline, "h100-svc never joined the service's nodes"
            time.sleep(0.2)
        half_h100 = _gpu("H100", 500, alternatives=[{"class": "gpu", "model": "A100"}])
        moves = up.submit(
            job("moves", scratch, {"cpu": "1", "memory": "1Gi", "devices": [half_h100]})
        )
        fails = up.submit(
            job(
                "fails",
                scratch,
                {"cpu": "1", "memory": "1Gi", "devices": [_gpu("H100", 500)]},
                on_device_failure="fail",
            )
        )
        first = _wait_started(up, scratch, moves)[0]
        _wait_started(up, scratch, fails)
        kill_raylet(ClusterInfo(cluster.address, {}, extra.pids(), "", ""), "h100-svc")
        second = _wait_started(up, scratch, moves, run=2, timeout_s=120)[0]
        _release(scratch, moves)
        jobs = up.wait([moves, fails], {"succeeded", "failed"})
        # the run on the dead node ends when Ray reports its actor gone, which may come
        # after the job's second run finished: wait for it (the test checks how it ended)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
            t["state"] == "stopping" for t in jobs[moves]["tasks"]
        ):
            time.sleep(0.2)
            jobs[moves] = up.job(moves)
        return {
            "first_node": first["node"],
            "second_node": second["node"],
            "second_devices": second["devices"],
            "moves": jobs[moves],
            "fails": jobs[fails],
            "why": up.api().get(f"/v1/jobs/{moves}/why").json(),
        }
    finally:
        extra.stop()


def _joined(up: Up, name: str) -> None:
    deadline = time.monotonic() + 60
    while name not in {n["name"] for n in up.api().get("/v1/nodes").json()}:
        assert time.monotonic() < deadline, f"{name} never joined the service's nodes"
        time.sleep(0.2)


def _device(up: Up, device_id: str, healthy: bool | None = None) -> dict[str, Any]:
    """The device as ``/v1/nodes`` shows it; with ``healthy``, once it shows that (the
    nodes' view is published after the turn that requeued the job: a moment later)."""
    deadline = time.monotonic() + 10
    while True:
        devices = [d for n in up.api().get("/v1/nodes").json() for d in n["devices"]]
        (device,) = [d for d in devices if d["id"] == device_id]
        if healthy is None or device["healthy"] is healthy or time.monotonic() > deadline:
            return dict(device)
        time.sleep(0.05)


def hotplug(up: Up, scratch: Path, cluster: ClusterInfo) -> dict[str, Any]:
    """A node joins with a fake device file; a job runs on its GPU; the GPU is unplugged on
    that node (its file loses it): the node's agent sees it, and the job is requeued as on
    the local node; plugged back, the job runs there again."""
    extra = LocalCluster(
        [LocalNodeSpec("h100-plug", "H100", 1)], join=cluster.address, fake_devices=True
    )
    extra.start()
    try:
        assert extra.workdir is not None
        devices = extra.workdir / "devices-h100-plug.yaml"
        plugged = devices.read_text()
        _joined(up, "h100-plug")
        job_id = up.submit(
            job("plug", scratch, {"cpu": "1", "memory": "1Gi", "devices": [_gpu("H100")]})
        )
        first = _wait_started(up, scratch, job_id)[0]
        partial = devices.with_suffix(".tmp")
        partial.write_text('{"devices": []}\n')
        partial.replace(devices)
        unplugged = time.monotonic()
        deadline = unplugged + 30
        while True:
            state = up.job(job_id)
            if state["state"] == "pending" and all(t["state"] == "stopped" for t in state["tasks"]):
                requeued_s = time.monotonic() - unplugged
                break
            assert time.monotonic() < deadline, f"not requeued: {state}"
            time.sleep(0.02)
        device = _device(up, "h100-plug/gpu0", healthy=False)
        why = up.api().get(f"/v1/jobs/{job_id}/why").json()
        partial.write_text(plugged)
        partial.replace(devices)
        second = _wait_started(up, scratch, job_id, run=2)[0]
        _release(scratch, job_id)
        done = up.wait([job_id], {"succeeded", "failed"})[job_id]
        return {
            "first": first,
            "second": second,
            "requeued_s": round(requeued_s, 3),
            "device_unplugged": [device["healthy"], device["health_reason"]],
            "device_after": [
                _device(up, "h100-plug/gpu0", healthy=True)[k] for k in ("healthy", "health_reason")
            ],
            "causes": [h["cause"] for h in why["history"]],
            "job": done,
        }
    finally:
        extra.stop()


def _scenario(out: dict[str, Any], name: str, run: Callable[[], Any]) -> None:
    if out["only"] is not None and name not in out["only"]:
        return
    began = time.monotonic()
    try:
        out[name] = {"ok": run()}
    except Exception:
        out[name] = {"error": traceback.format_exc()}
    out[name]["seconds"] = round(time.monotonic() - began, 1)


def service_on_ray(cluster: ClusterInfo, only: list[str] | None = None) -> dict[str, Any]:
    """Every scenario (or those named in ``only``) against one `hetsched up --executor ray`,
    then the workload against `hetsched up` with the local executor, for comparison."""
    scratch = Path(cluster.scratch)
    profile = scratch / "profile.yaml"
    profile.write_text(PROFILE)
    _api.connect(cluster.address)  # to ask Ray where the tasks' agents run
    ray_args = ["--executor", "ray", "--ray-address", cluster.address, "--kill-grace", "2"]
    ray_args += ["--watch-interval", "0.2"]
    up = Up(scratch / "home-ray", [*ray_args, "--profile", str(profile)], scratch / "up.log")
    up.args += ["--advertise-url", up.url]  # tasks report checkpoints through it
    out: dict[str, Any] = {"node_ids": cluster.node_ids, "only": only}
    try:
        up.start()
        _scenario(out, "workload", lambda: run_workload(up, scratch / "w-ray", True))
        _scenario(out, "cancel", lambda: cancel(up, scratch / "cancel"))
        _scenario(out, "preemption", lambda: preemption(up, scratch / "preempt"))
        _scenario(out, "crash", lambda: control_plane_crash(up, scratch / "crash"))
        _scenario(out, "resume", lambda: notice_and_resume(up, scratch / "resume"))
        _scenario(out, "guard", lambda: overcommit(up, scratch / "guard"))
        _scenario(out, "hotplug", lambda: hotplug(up, scratch / "hotplug", cluster))
        _scenario(out, "raylet", lambda: raylet_dies(up, scratch / "raylet", cluster))
    except Exception:
        out["error"] = traceback.format_exc() + "\n" + up.tail()
    finally:
        up.stop()
    cluster_file = scratch / "cluster.yaml"
    cluster_file.write_text(LOCAL_CLUSTER)
    local_args = ["--node-name", "cpu-0", "--backend", "cpu", "--cluster", str(cluster_file)]
    local = Up(scratch / "home-local", [*local_args, "--profile", str(profile)], scratch / "l.log")
    try:
        local.start()
        _scenario(out, "local", lambda: run_workload(local, scratch / "w-local", False))
    finally:
        local.stop()
    out["log"] = up.tail(3000)
    return out
