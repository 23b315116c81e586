"""A restart keeps the queue: pending jobs keep their queue time, their aging and their
place in line. The jobs wait behind a task that holds the only device they want; with a
strong aging rate, older low-priority jobs have passed younger high-priority ones, which a
queue time reset at the restart would undo."""

from __future__ import annotations

import time
from pathlib import Path

from service_fixtures import Api, job_body, service_options

from hetsched.controlplane.loop import ControlLoop
from hetsched.service.testing import running

PROFILE = """
name: aging
queue_sort:
  name: priority
  args: {aging_rate: 1.0}
"""
MI250 = {"cpu": "100m", "memory": "64Mi", "devices": [{"class": "gpu", "model": "MI250"}]}
#: priorities in submission order: with 1 point per second of waiting and 0.4 s between
#: submissions, the first low-priority jobs stay ahead of the later high-priority ones
PRIORITIES = [0, 0, 2, 1, 0, 3, 1, 2, 0, 3]


def _queue(loop: ControlLoop, job_ids: list[str]) -> list[tuple[str, float, int]]:
    """(job, queued_since, place in line) of each job, in line order."""
    deadline = time.monotonic() + 30
    while True:
        with loop.lock:
            core = loop.planner.core
            views = [core.view.job(j) for j in job_ids]
            if all(v is not None for v in views):
                line = []
                for job_id, view in zip(job_ids, views, strict=True):
                    assert view is not None
                    place = core.position(job_id)
                    assert place is not None, job_id
                    line.append((job_id, view.queued_since, place[1]))
                return sorted(line, key=lambda item: item[2])
        assert time.monotonic() < deadline, "the jobs did not reach the core"
        time.sleep(0.05)


def test_pending_jobs_keep_queue_time_aging_and_order_across_a_restart(tmp_path: Path) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE)
    options = service_options(tmp_path, profile=profile)
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        hog = api.alice.post(
            "/v1/jobs", json=job_body(command=["sleep", "120"], resources=MI250)
        ).json()["id"]
        api.wait(api.alice, hog, {"running"})
        waiting = []
        for i, priority in enumerate(PRIORITIES):
            body = job_body(name=f"w{i}", priority=priority, resources=MI250)
            waiting.append(api.alice.post("/v1/jobs", json=body).json()["id"])
            time.sleep(0.4)
        before = _queue(svc.built.service.loop, waiting)
        api.close()
    with running(options) as svc:
        after = _queue(svc.built.service.loop, waiting)
    assert after == before
    # aging mattered: the line is not the order of priorities alone
    by_priority = sorted(waiting, key=lambda j: -PRIORITIES[waiting.index(j)])
    assert [job for job, _since, _place in before] != by_priority
