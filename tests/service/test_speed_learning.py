"""Online speed learning end to end: the real service, fake devices of two models (A100 and
T4, as ``hetsched up --demo`` fakes them), real processes running the example script
(examples/jobs/speed/train.py), real HTTP.

- A job type with per-model rates in the profile lands on its fastest free model, and its
  progress reports (the ``PROGRESS`` file) update the service's estimate: ``/v1/speeds``,
  ``why``, ``/metrics``.
- A job type the profile does not list is learned from reports (through ``hetsched
  progress``) on each model; a later job of that type goes to the faster one; the
  estimates survive a restart.

The measured rates are checked only loosely (within a factor of 2 of the script's rate):
they are wall-clock measurements on a shared machine.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from service_fixtures import Api, service_options

from builders import EXAMPLES
from hetsched.service.testing import running

SCRIPT_DIR = EXAMPLES / "jobs" / "speed"
#: best-fit alone puts a 1-GPU job on the T4 node (it fills it)
CLUSTER = """
nodes:
  - name: a100-node
    cpu: "16"
    memory: 64Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 2}
  - name: t4-node
    cpu: "16"
    memory: 64Gi
    devices:
      - {class: gpu, vendor: nvidia, model: T4, count: 1}
"""
PROFILE = """
score:
  - bestfit
  - {name: speed, weight: 2}
speeds:
  job_types:
    demo-train: {A100: 4, T4: 1}
"""
RATES = "A100=40,T4=10"


def _train(
    name: str, job_type: str, model: str | None = None, args: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The example script as a job (3 s of training unless ``args`` say otherwise)."""
    device: dict[str, Any] = {"class": "gpu", "count": 1}
    if model is not None:
        device["model"] = model
    return {
        "name": name,
        "job_type": job_type,
        "resources": {"cpu": "1", "memory": "256Mi", "devices": [device]},
        "workdir": str(SCRIPT_DIR),
        "command": [
            sys.executable,
            "train.py",
            "--rates",
            RATES,
            "--seconds",
            "3",
            *args,
        ],
    }


def _model_of(api: Api, job: dict[str, Any]) -> str:
    devices = {d["id"]: d["model"] for n in api.admin.get("/v1/nodes").json() for d in n["devices"]}
    models = {devices[d["id"]] for t in job["tasks"] for d in t["devices"]}
    assert len(models) == 1, job
    return models.pop()


def _started(api: Api, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        job = api.alice.get(f"/v1/jobs/{job_id}").json()
        if job["tasks"] and job["tasks"][0]["devices"]:
            return job  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def _estimates(api: Api) -> dict[tuple[str, str], dict[str, Any]]:
    found = api.alice.get("/v1/speeds").json()["estimates"]
    return {(e["job_type"], e["model"]): e for e in found}


def _service(tmp_path: Path) -> Any:
    cluster = tmp_path / "speed-cluster.yaml"
    cluster.write_text(CLUSTER)
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE)
    return running(service_options(tmp_path, cluster=[cluster], profile=profile))


def _gauges(api: Api) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(api.admin.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "hetsched_speed_estimate_steps_per_second":
                out[(sample.labels["job_type"], sample.labels["model"])] = sample.value
    return out


def test_a_demo_job_type_lands_on_its_fastest_free_model_and_teaches_its_speed(
    tmp_path: Path,
) -> None:
    with _service(tmp_path) as svc:
        api = Api(svc)
        try:
            ids = []
            for name, model in (("fast-0", "A100"), ("fast-1", "A100"), ("next", "T4")):
                # the A100s taken, the last one gets the fastest free model, the T4
                job_id = api.alice.post("/v1/jobs", json=_train(name, "demo-train")).json()["id"]
                assert _model_of(api, _started(api, job_id)) == model
                ids.append(job_id)
            first = ids[0]
            for job_id in ids:
                assert api.wait(api.alice, job_id, {"succeeded", "failed"}, 60)["state"] == (
                    "succeeded"
                )
            learned = _estimates(api)
            a100, t4 = learned[("demo-train", "A100")], learned[("demo-train", "T4")]
            assert a100["samples"] >= 1 and t4["samples"] >= 1
            assert 20 <= a100["steps_per_second"] <= 80
            assert 5 <= t4["steps_per_second"] <= 20
            gauges = _gauges(api)
            assert gauges[("demo-train", "A100")] == a100["steps_per_second"]

            why = api.alice.get(f"/v1/jobs/{first}/why").json()["speed"]
            assert why["job_type"] == "demo-train" and why["source"] == "profile"
            assert why["rates"] == {"a100": 4.0, "t4": 1.0}  # the profile's table decides
            assert {e["model"] for e in why["estimates"]} == {"A100", "T4"}
        finally:
            api.close()


def test_a_learned_job_type_goes_where_it_was_measured_fastest(tmp_path: Path) -> None:
    with _service(tmp_path) as svc:
        api = Api(svc)
        try:
            # no speed information: every model is equal, best-fit decides (the T4 node)
            blind = api.alice.post("/v1/jobs", json=_train("blind", "learn-me")).json()["id"]
            assert _model_of(api, _started(api, blind)) == "T4"
            assert api.alice.get(f"/v1/jobs/{blind}/why").json()["speed"]["source"] == "none"
            api.wait(api.alice, blind, {"succeeded", "failed"}, 60)
            # one run on each model, reporting through `hetsched progress`
            # each call of the command starts a Python: longer runs, so that some intervals
            # between reports are measured even on a loaded machine
            cli = ("--report", "cli", "--every", "0.6", "--seconds", "6")
            ids = [
                api.alice.post("/v1/jobs", json=_train(f"on-{m}", "learn-me", m, cli)).json()["id"]
                for m in ("A100", "T4")
            ]
            for job_id in ids:
                job = api.wait(api.alice, job_id, {"succeeded", "failed"}, 90)
                log = api.alice.get(f"/v1/jobs/{job_id}/logs", params={"stream": "stderr"})
                assert job["state"] == "succeeded", log.json()["data"]
            learned = _estimates(api)
            assert (
                learned[("learn-me", "A100")]["steps_per_second"]
                > (learned[("learn-me", "T4")]["steps_per_second"])
            )
            later = api.alice.post("/v1/jobs", json=_train("later", "learn-me")).json()["id"]
            assert _model_of(api, _started(api, later)) == "A100"
            why = api.alice.get(f"/v1/jobs/{later}/why").json()["speed"]
            assert why["source"] == "learned" and why["rates"]["a100"] > why["rates"]["t4"]
            api.wait(api.alice, later, {"succeeded", "failed"}, 60)
        finally:
            api.close()
    # the estimates are in the store: a restarted service still has them
    with _service(tmp_path) as svc:
        api = Api(svc)
        try:
            assert set(_estimates(api)) >= {("learn-me", "A100"), ("learn-me", "T4")}
        finally:
            api.close()


def test_progress_reports_need_the_task_token(api: Api) -> None:
    """A user's token is no task's token; a malformed report names its field."""
    url = f"{api.url}/v1/progress"
    body = {"task": "jabc/0#1", "steps": 5}
    user = httpx.post(url, json=body, headers={"Authorization": f"Bearer {api.tokens['alice']}"})
    assert user.status_code == 401
    bad = httpx.post(url, json={"task": "jabc/0#1", "steps": -1})
    assert bad.status_code == 422 and "steps" in bad.text
    odd = httpx.post(url, json={"task": "not a key", "steps": 1})
    assert odd.status_code == 422 and "task" in odd.text
