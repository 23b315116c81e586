"""/metrics against the real service: parsed with prometheus-client's own parser."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from service_fixtures import Api, job_body, service_options, serving

from hetsched.agent.guard import Guard, Watched
from hetsched.cluster.state import ClusterState
from hetsched.controlplane.metrics import (
    METRIC_NAMES,
    History,
    LoopMetrics,
    target_workload,
)
from hetsched.controlplane.metrics import (
    Sample as HistorySample,
)
from hetsched.framework.profile import GuardSpec
from hetsched.model.device import Device, Node
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.scheduler import Bind, JobSubmitted, NodeAdded, Scheduler
from hetsched.service.testing import running


def scrape(client: httpx.Client) -> dict[str, list[Sample]]:
    answer = client.get("/metrics")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    out: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def value(samples: dict[str, list[Sample]], name: str, **labels: str) -> float:
    found = [s.value for s in samples.get(name, []) if labels.items() <= s.labels.items()]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def wait_for(api: Api, check: object, timeout: float = 20) -> dict[str, list[Sample]]:
    """Scrape until ``check(samples)`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(api.admin)
        try:
            if check(samples):  # type: ignore[operator]
                return samples
        except AssertionError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"metrics never matched: {sorted(samples)}")
        time.sleep(0.1)


def test_metrics_follow_jobs_devices_and_the_loop(api: Api) -> None:
    # one A100 for a long job, a second A100 job that must wait, and a quick CPU job
    running_job = api.alice.post(
        "/v1/jobs",
        json=job_body(
            name="hold",
            command=["sleep", "30"],
            resources={
                "cpu": "1",
                "memory": "1Gi",
                "devices": [{"class": "gpu", "count": 2, "model": "A100"}],
            },
        ),
    ).json()
    api.wait(api.alice, running_job["id"], {"running"})
    # half of the MI250; a job asking for two whole GPUs must then wait
    half = api.bob.post(
        "/v1/jobs",
        json=job_body(
            name="half",
            command=["sleep", "30"],
            resources={
                "cpu": "1",
                "memory": "1Gi",
                "devices": [{"class": "gpu", "count": 1, "share": 500, "model": "MI250"}],
            },
        ),
    ).json()
    api.wait(api.bob, half["id"], {"running"})
    waiting = api.bob.post(
        "/v1/jobs",
        json=job_body(
            name="waits",
            resources={"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "count": 2}]},
        ),
    ).json()
    done = api.alice.post("/v1/jobs", json=job_body(name="quick")).json()
    api.wait(api.alice, done["id"], {"succeeded"})

    def ready(s: dict[str, list[Sample]]) -> bool:
        return value(s, "hetsched_jobs", queue="default", state="pending") == 1

    samples = wait_for(api, ready)
    assert value(samples, "hetsched_jobs", queue="default", state="running") == 2
    assert value(samples, "hetsched_jobs", queue="default", state="succeeded") == 1
    assert value(samples, "hetsched_oldest_pending_job_age_seconds", queue="default") >= 0
    # allocation per class and model, from the core's cluster state
    assert value(samples, "hetsched_devices", **{"class": "gpu", "model": "A100"}) == 2
    assert value(samples, "hetsched_device_allocated", **{"class": "gpu", "model": "A100"}) == 2
    assert value(samples, "hetsched_device_allocated", **{"class": "gpu", "model": "MI250"}) == 0.5
    assert (
        value(samples, "hetsched_device_allocation_ratio", **{"class": "fpga", "model": "U250"})
        == 0
    )
    assert value(samples, "hetsched_devices_unhealthy", **{"class": "gpu", "model": "A100"}) == 0
    healthy = samples["hetsched_device_healthy"]
    assert len(healthy) == 4 and {s.value for s in healthy} == {1.0}
    assert value(samples, "hetsched_nodes", state="active") == 3
    assert value(samples, "hetsched_cpu_allocated_cores") == 2
    # the target workload is the jobs' shapes: two whole GPUs (and half a GPU); the half-used
    # MI250 cannot host a whole-GPU task, so its idle half is fragmented
    assert value(samples, "hetsched_fragmentation_ratio", **{"class": "gpu", "model": "MI250"}) > 0
    assert value(samples, "hetsched_fragmentation_ratio", **{"class": "gpu", "model": "A100"}) == 0
    # what the loop counted
    assert value(samples, "hetsched_scheduling_attempts_total", result="scheduled") >= 3
    assert value(samples, "hetsched_scheduling_attempts_total", result="unschedulable") >= 1
    assert value(samples, "hetsched_scheduling_attempts_total", result="error") == 0
    assert value(samples, "hetsched_scheduling_cycle_duration_seconds_count") >= 1
    assert value(samples, "hetsched_queue_wait_seconds_count", queue="default") >= 3
    assert value(samples, "hetsched_loop_turns_total") >= 1
    assert value(samples, "hetsched_loop_last_turn_timestamp_seconds") > 0
    # every family exported is a documented name, and every documented name is exported
    # (the agent's utilization and alert families are empty without its watchers)
    families = {
        f.name + ("_total" if f.type == "counter" else "")
        for f in text_string_to_metric_families(api.admin.get("/metrics").text)
    }
    assert families == METRIC_NAMES
    # the history behind the dashboard's charts
    deadline = time.monotonic() + 20
    while True:
        ring = api.alice.get("/v1/history").json()
        last = ring["samples"][-1]
        if last["allocation"]["gpu"] > 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ring["interval_s"] > 0
    assert set(last) == {"time", "allocation", "utilization", "pending", "running"}
    # 2 A100s and half an MI250 of 3 GPUs
    assert last["allocation"]["gpu"] == pytest.approx(2.5 / 3)
    assert last["pending"] == {"default": 1} and last["running"] == 2
    newer = api.alice.get("/v1/history", params={"since": last["time"]}).json()["samples"]
    assert all(s["time"] > last["time"] for s in newer)
    assert waiting["state"] == "pending"


def test_preemptions_are_counted(tmp_path: Path) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text(
        "name: p\nqueue_sort: {name: priority}\n"
        "post_filter: [{name: preemption, args: {grace_s: 1, priority: true}}]\n"
    )
    with serving(service_options(tmp_path, profile=profile)) as api:
        low = api.alice.post(
            "/v1/jobs",
            json=job_body(
                name="low",
                priority=0,
                command=["sleep", "60"],
                resources={"cpu": "1", "memory": "1Gi", "devices": [{"class": "fpga"}]},
            ),
        ).json()
        api.wait(api.alice, low["id"], {"running"})
        high = api.bob.post(
            "/v1/jobs",
            json=job_body(
                name="high",
                priority=10,
                resources={"cpu": "1", "memory": "1Gi", "devices": [{"class": "fpga"}]},
            ),
        ).json()
        api.wait(api.bob, high["id"], {"running", "succeeded"})
        samples = scrape(api.admin)
        assert value(samples, "hetsched_preemptions_total", queue="default") == 1


def test_the_overcommit_guards_measures_and_alerts_are_exported(tmp_path: Path) -> None:
    # the service's own guard is off: this test drives one by hand, with no loop round
    # racing it
    profile = tmp_path / "profile.yaml"
    profile.write_text("name: hand-guard\nguard: {enabled: false}\n")
    with serving(service_options(tmp_path, profile=profile)) as api:
        assert api.svc.built.service.loop.guard is None
        _guard_exports(api)


def _guard_exports(api: Api) -> None:
    guard = Guard(GuardSpec(), node="local")
    service = api.svc.built.service
    service.guard = guard  # type: ignore[attr-defined]
    body = job_body(
        name="big",
        command=["sleep", "30"],
        resources={"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "model": "A100"}]},
    )
    job = api.alice.post("/v1/jobs", json=body).json()
    api.wait(api.alice, job["id"], {"running"})
    task = api.alice.get(f"/v1/jobs/{job['id']}").json()["tasks"][0]
    # a task that asked for 1 MiB of memory: its process tree uses more
    watched = Watched(f"{job['id']}/0#1", job["id"], 0, 1, "local", task["pid"], 1, 1000, False)
    raised = guard.check([watched], node_memory=0.1)
    assert [a.kind for a in raised] == ["task_memory"]
    samples = scrape(api.admin)
    assert value(samples, "hetsched_alerts_total", kind="task_memory") == 1
    assert value(samples, "hetsched_guard_kills_total") == 0
    assert value(samples, "hetsched_tasks_memory_used_bytes") > 1 << 20
    assert value(samples, "hetsched_tasks_cpu_used_cores") >= 0
    # no NVML here: the GPU memory its processes would hold is put in by hand
    guard.usage = {watched.key: replace(guard.usage[watched.key], gpu_memory_mib=2048.0)}
    samples = scrape(api.admin)
    gpu = {"class": "gpu", "model": "A100"}
    assert value(samples, "hetsched_device_memory_used_bytes", **gpu) == 2048 << 20
    assert value(samples, "hetsched_tasks_gpu_memory_used_bytes") == 2048 << 20
    _utilization_exports(api, guard, watched, task)


class _Measured:
    """A part of the agent that reads devices itself, as the watcher does through NVML."""

    def __init__(self, values: dict[str, float]) -> None:
        self.values = values

    def utilization(self) -> dict[str, float]:
        return dict(self.values)


def _utilization_exports(api: Api, guard: Guard, watched: Watched, task: dict[str, object]) -> None:
    held = [d["id"] for d in task["devices"]]  # type: ignore[attr-defined]
    assert len(held) == 1
    # the guard's estimate: the task asked for 1 core and its processes use half of one
    guard.usage = {watched.key: replace(guard.usage[watched.key], cpu_milli=500.0)}
    samples = scrape(api.admin)
    util = {s.labels["device"]: s for s in samples["hetsched_device_utilization_ratio"]}
    assert util[held[0]].value == pytest.approx(0.5)
    assert util[held[0]].labels["source"] == "guard"
    idle = [d for d, s in util.items() if d != held[0]]
    assert idle and all(util[d].value == 0 and util[d].labels["source"] == "guard" for d in idle)
    # a part that reads the device wins over the estimate, for the devices it reads
    service = api.svc.built.service
    service.monitor = _Measured({held[0]: 0.9, "no-such-device": 1.0})  # type: ignore[attr-defined]
    try:
        samples = scrape(api.admin)
    finally:
        service.monitor = None  # type: ignore[attr-defined]
    util = {s.labels["device"]: s for s in samples["hetsched_device_utilization_ratio"]}
    assert (util[held[0]].value, util[held[0]].labels["source"]) == (0.9, "device")
    assert "no-such-device" not in util and all(util[d].labels["source"] == "guard" for d in idle)


def test_metrics_need_a_token_unless_public(tmp_path: Path) -> None:
    (tmp_path / "closed").mkdir()
    (tmp_path / "open").mkdir()
    with running(service_options(tmp_path / "closed")) as svc:
        assert httpx.get(f"{svc.url}/metrics").status_code == 401
        assert httpx.get(f"{svc.url}/metrics", headers={"Authorization": "Bearer x"}).is_error
    with running(service_options(tmp_path / "open", metrics_public=True)) as svc:
        answer = httpx.get(f"{svc.url}/metrics")
        assert answer.status_code == 200 and "hetsched_jobs" in answer.text
        # only /metrics opens
        assert httpx.get(f"{svc.url}/v1/history").status_code == 401


def test_two_services_in_one_process_keep_their_own_counts(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    with (
        running(service_options(tmp_path / "one")) as one,
        running(service_options(tmp_path / "two")) as two,
    ):
        api_one, api_two = Api(one), Api(two)
        try:
            job = api_one.alice.post("/v1/jobs", json=job_body(name="only-here")).json()
            api_one.wait(api_one.alice, job["id"], {"succeeded"})
            first, second = scrape(api_one.admin), scrape(api_two.admin)
            assert value(first, "hetsched_jobs", queue="default", state="succeeded") == 1
            assert "hetsched_jobs" not in second
            assert value(second, "hetsched_scheduling_attempts_total", result="scheduled") == 0
        finally:
            api_one.close()
            api_two.close()


# -- the pieces, without a service --------------------------------------------------------------


def _gpu_job(job_id: str, count: int, share: int = 1000, replicas: int = 1) -> Job:
    return Job(
        job_id,
        TaskRequest(1000, 1024, (DeviceRequest.of("gpu", count, share),)),
        replicas=replicas,
        gang=1,
    )


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        ([], [(0, 1, 1000, 1.0)]),
        ([_gpu_job("a", 2)], [(1000, 2, 1000, 1.0)]),
        (
            [_gpu_job("a", 1, 250, replicas=3), _gpu_job("b", 2)],
            [(1000, 1, 250, 0.75), (1000, 2, 1000, 0.25)],
        ),
    ],
)
def test_target_workload_is_the_jobs_shapes(
    jobs: list[Job], expected: list[tuple[int, int, int, float]]
) -> None:
    node = Node("n", 8000, 8192, tuple(Device(f"g{i}", "gpu") for i in range(4)))
    core = Scheduler(ClusterState())
    core.handle([NodeAdded(node)], now=0.0)
    core.handle([JobSubmitted(j) for j in jobs], now=1.0)
    target = target_workload(core.view, "gpu")
    got = [
        (c.cpu_milli, c.count, c.share, round(float(w), 6))
        for c, w in zip(target.classes, target.weight, strict=True)
    ]
    assert got == expected


def test_queue_wait_is_observed_once_per_start() -> None:
    node = Node("n", 8000, 8192, (Device("g0", "gpu"),))
    core = Scheduler(ClusterState())
    core.handle([NodeAdded(node)], now=0.0)
    metrics = LoopMetrics()
    actions = core.handle([JobSubmitted(_gpu_job("a", 1))], now=5.0)
    assert any(isinstance(a, Bind) for a in actions)
    metrics.observe_turn(actions, 0.001, lambda _job: "default", pending=0)
    later = core.handle([JobSubmitted(_gpu_job("b", 1))], now=7.0)
    metrics.observe_turn(later, 0.001, lambda _job: "default", pending=1)
    registry = metrics.registry
    assert registry.get_sample_value("hetsched_queue_wait_seconds_count", {"queue": "default"}) == 1
    assert (
        registry.get_sample_value("hetsched_scheduling_attempts_total", {"result": "scheduled"})
        == 1
    )
    assert (
        registry.get_sample_value("hetsched_scheduling_attempts_total", {"result": "unschedulable"})
        == 1
    )


def test_history_keeps_one_sample_per_interval_and_the_newest() -> None:
    ring = History(interval_s=2.0, size=3)
    added = []
    for t in (0.0, 1.0, 2.0, 3.0, 4.5, 6.5, 9.0):
        if ring.due(t):
            ring.add(HistorySample(t, {"gpu": 0.5}, {}, {"default": 1}, 0))
            added.append(t)
    assert added == [0.0, 2.0, 4.5, 6.5, 9.0]
    assert [s.time for s in ring.since()] == [4.5, 6.5, 9.0]
    assert [s.time for s in ring.since(6.5)] == [9.0]


def test_stranded_accelerators_are_exported(tmp_path: Path) -> None:
    with serving(service_options(tmp_path)) as api:
        samples = scrape(api.admin)
        assert value(samples, "hetsched_stranded_accelerators") == 0
        # a CPU-only job that only gpu-node can host (16 cores) leaves it 4 cores for
        # its three free GPUs, which need 16/3 each: all three are stranded; the FPGA
        # node is untouched
        job = api.alice.post(
            "/v1/jobs",
            json=job_body(command=["sleep", "30"], resources={"cpu": "12", "memory": "1Gi"}),
        ).json()
        api.wait(api.alice, job["id"], {"running"})
        samples = scrape(api.admin)
        assert value(samples, "hetsched_stranded_accelerators") == 3
        assert value(samples, "hetsched_stranded_accelerators_ratio") == pytest.approx(3 / 4)
        api.alice.post(f"/v1/jobs/{job['id']}/cancel")
