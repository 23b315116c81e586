"""The overcommit guard in the real service: a best-effort task that allocates far more
memory than it asked for raises an alert (an entry in the guard's list, a counter) and,
with the profile's kill policy, is killed; guaranteed tasks are untouched."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from service_fixtures import Api, job_body, service_options, serving

PROFILE = """
name: guarded
overcommit: {{cpu: 1.5, memory: 1.0}}
guard:
  interval_s: 0.2
  memory_tolerance: 1.0
  node_memory_threshold: 1.0
  kill_best_effort: {kill}
"""

#: allocates and touches 300 MiB, then waits
HOG = [
    sys.executable,
    "-c",
    "import time; b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(60)",
]


def _local(body: dict[str, Any]) -> dict[str, Any]:
    resources = dict(body["resources"])  # type: ignore[arg-type]
    resources["node_selector"] = {"hetsched.io/node": "local"}
    return {**body, "resources": resources}


def _wait(api: Api, job_id: str, check: Any, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = api.admin.get(f"/v1/jobs/{job_id}").json()
        if check(job):
            return job  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def _running(job: dict[str, Any]) -> bool:
    return job["state"] == "running" and all(t["pid"] for t in job["tasks"])


@pytest.mark.parametrize("kill", [True, False])
def test_a_best_effort_hog_is_alerted_and_killed_by_policy(tmp_path: Path, kill: bool) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE.format(kill=str(kill).lower()))
    with serving(service_options(tmp_path, profile=profile)) as api:
        guard = api.svc.built.service.loop.guard
        assert guard is not None
        # a request well above an interpreter's own footprint (about 10-40 MiB while it
        # starts): the alert can only come from the 300 MiB it allocates, however late
        # in its growth the guard's round happens to measure it
        hog = job_body(
            name="hog", command=HOG, best_effort=True, resources={"cpu": "1", "memory": "128Mi"}
        )
        calm = job_body(
            name="calm", command=["sleep", "60"], resources={"cpu": "1", "memory": "256Mi"}
        )
        calm_id = api.alice.post("/v1/jobs", json=_local(calm)).json()["id"]
        hog_id = api.alice.post("/v1/jobs", json=_local(hog)).json()["id"]
        calm_pid = _wait(api, calm_id, _running)["tasks"][0]["pid"]
        # no wait for the hog to be seen running: under load the guard may catch and
        # kill it between two polls; the alert below names it, which needs it to have run
        deadline = time.monotonic() + 30
        while not guard.counts["task_memory"]:
            assert time.monotonic() < deadline, "no alert"
            time.sleep(0.05)
        (alert,) = guard.recent()
        assert (alert.kind, alert.job_id, alert.task) == ("task_memory", hog_id, 0)
        assert alert.measured > alert.limit == 128
        assert alert.to_dict()["node"] == "local"

        if kill:
            job = _wait(api, hog_id, lambda j: j["state"] == "failed")
            assert "killed by the overcommit guard" in job["reason"]
            assert guard.kills == 1
        else:
            time.sleep(1.0)
            assert api.admin.get(f"/v1/jobs/{hog_id}").json()["state"] == "running"
            assert guard.kills == 0
        # the alert, and the kill, are in the job's history
        history = api.alice.get(f"/v1/jobs/{hog_id}/why").json()["history"]
        causes = [h["cause"] for h in history]
        assert [c for c in causes if c.startswith("overcommit guard: ")] == [
            f"overcommit guard: {alert.message}"
        ]
        if kill:
            assert "killed by the overcommit guard" in causes[-1]
        # the guaranteed task is untouched, and one alert was raised, not one per round
        calm_now = api.admin.get(f"/v1/jobs/{calm_id}").json()
        assert calm_now["state"] == "running"
        assert calm_now["tasks"][0]["pid"] == calm_pid
        assert guard.counts == {"task_memory": 1}
