"""`make demo`: the demo's summary, and the whole demo end to end."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from hetsched.service.demo import summarize


def test_summary_of_literal_jobs() -> None:
    jobs = [
        {
            "name": "a",
            "state": "succeeded",
            "submitted_at": 0.0,
            "first_started_at": 1.0,
            "ended_at": 10.0,
            "preemptions": 1,
            "tasks": [
                {"started_at": 1.0, "ended_at": 6.0, "devices": [{"id": "n/gpu0", "share": 1000}]},
            ],
        },
        {
            "name": "b",
            "state": "failed",
            "submitted_at": 0.0,
            "first_started_at": 3.0,
            "ended_at": 5.0,
            "preemptions": 0,
            "tasks": [
                {"started_at": 3.0, "ended_at": 5.0, "devices": [{"id": "n/gpu1", "share": 500}]},
            ],
        },
    ]
    nodes = [
        {
            "devices": [
                {"id": "n/gpu0", "class": "gpu", "model": "A100"},
                {"id": "n/gpu1", "class": "gpu", "model": "A100"},
            ]
        }
    ]
    summary = summarize(jobs, nodes)
    assert summary["by_state"] == {"succeeded": 1, "failed": 1}
    assert summary["wait_mean_s"] == 2.0 and summary["wait_p99_s"] == 3.0
    # (5 s whole + 2 s half) over 2 devices x 10 s
    assert summary["utilization"] == {"gpu A100": pytest.approx(6.0 / 20.0)}
    assert (summary["preemptions"], summary["preempted"]) == (1, ["a"])


@pytest.mark.slow
def test_the_demo_runs_every_job_kind_and_preempts_once() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hetsched.service.demo"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "jobs: 11 (11 succeeded)" in out
    # the demo job type landed on a device model and taught the service its speed there
    ran = re.search(r"train-speed \(job type demo-train\) ran on (\w+)", out)
    assert ran is not None and ran.group(1) in ("A100", "V100", "T4"), out[-3000:]
    assert re.search(rf"learned: demo-train on {ran.group(1)}: [\d.]+ steps/s per device", out)
    assert "preemptions: 1 (batch-embed)" in out
    for model in ("gpu A100", "gpu V100", "gpu T4", "fpga U250"):
        assert model in out
    assert "rank 0 done" in out
    # the preempted job checkpointed on its notice and its second run resumed there
    saved = re.findall(r"notice received: saved at step (\d+)", out)
    assert len(saved) == 1 and int(saved[0]) >= 1, out[-3000:]
    assert f"starting at step {saved[0]} (resuming from" in out
    assert "hetsched up stopped (exit status 0)" in out
