"""Checkpointing specs: job files, the API body, the workload columns, with field paths."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hetsched.model.checkpoint import Checkpointing, SavedCheckpoint, signal_name
from hetsched.model.specs import SpecError, parse_jobs
from hetsched.sim.workload import WorkloadError, parse_rows, read_workload, write_workload

HEADER = (
    "submit_time,duration,user,queue,priority,cpu,memory,device_class,count,share,selector,gang"
)


def _one(checkpoint: Any) -> Checkpointing | None:
    return parse_jobs({"jobs": [{"name": "j", "checkpoint": checkpoint}]})[0].checkpoint


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, Checkpointing(None, 30.0, "SIGUSR1", 0.0)),
        ({"interval_s": 600, "notice_s": 20}, Checkpointing(600.0, 20.0)),
        ({"interval": "10m", "notice": "1m", "cost": "5s"}, Checkpointing(600.0, 60.0, cost_s=5.0)),
        ({"interval_s": 0}, Checkpointing(0.0)),
        ({"signal": "usr2"}, Checkpointing(signal="SIGUSR2")),
        ({"signal": "SIGTERM", "notice_s": 0}, Checkpointing(notice_s=0.0, signal="SIGTERM")),
        ({"signal": 12}, Checkpointing(signal="SIGUSR2")),
    ],
)
def test_checkpoint_specs(given: dict[str, Any], expected: Checkpointing) -> None:
    assert _one(given) == expected


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"interval_s": -1}, "jobs[0].checkpoint.interval_s: must not be negative, got -1"),
        ({"notice": "2h"}, "jobs[0].checkpoint.notice: at most 3600s"),
        ({"signal": "KILL"}, "jobs[0].checkpoint.signal: SIGKILL cannot be caught"),
        ({"signal": "SIGSTOP"}, "jobs[0].checkpoint.signal: SIGSTOP cannot be caught"),
        ({"signal": "BOGUS"}, "jobs[0].checkpoint.signal: unknown signal 'BOGUS'"),
        ({"signal": True}, "jobs[0].checkpoint.signal: expected a signal name"),
        ({"cost": [1]}, "jobs[0].checkpoint.cost: expected a duration"),
        ({"interval": "soon"}, "jobs[0].checkpoint.interval: not a duration: 'soon'"),
        ({"interval_s": float("inf")}, "jobs[0].checkpoint.interval_s: must be finite"),
        ({"every": 5}, "jobs[0].checkpoint.every: Extra inputs are not permitted"),
        ("yes", "jobs[0].checkpoint: Input should be a valid dictionary"),
    ],
)
def test_bad_checkpoint_specs_name_the_field(given: Any, error: str) -> None:
    with pytest.raises(SpecError) as caught:
        _one(given)
    assert any(e.startswith(error) for e in caught.value.errors), caught.value.errors


def test_a_job_without_checkpoint_gets_no_notice() -> None:
    job = parse_jobs({"jobs": [{"name": "j"}]})[0]
    assert job.checkpoint is None and job.notice_s == 0.0
    assert parse_jobs({"jobs": [{"name": "j", "checkpoint": {"notice_s": 7}}]})[0].notice_s == 7


def test_the_api_body_takes_checkpoint_strictly() -> None:
    from pydantic import ValidationError

    from hetsched.controlplane.schemas import parse_submission

    body = {
        "name": "train",
        "command": ["python", "train.py"],
        "resources": {"cpu": "1"},
        "checkpoint": {"interval_s": "5m", "notice_s": 10, "signal": "SIGUSR2"},
    }
    spec = parse_submission(json.dumps(body))
    assert spec.to_job("j1", "alice", 0.0).checkpoint == Checkpointing(300.0, 10.0, "SIGUSR2")
    body["checkpoint"] = {"notice_s": -3}
    with pytest.raises(ValidationError, match=r"checkpoint\.notice_s"):
        parse_submission(json.dumps(body))


def test_signal_names() -> None:
    assert signal_name("SIGUSR1") == signal_name("usr1") == signal_name(" Usr1 ") == "SIGUSR1"
    with pytest.raises(ValueError, match="cannot be caught"):
        signal_name("9")


def test_saved_checkpoint_describes_itself() -> None:
    assert SavedCheckpoint(120.0, 1).describe() == "t=120"
    assert SavedCheckpoint(120.5, 2, step=400, path="/x").describe() == "t=120.5 (step 400)"


def test_workload_columns_round_trip(tmp_path: Any) -> None:
    rows = [
        HEADER + ",checkpoint_interval,checkpoint_cost,checkpoint_notice",
        "0,1h,,,,1,,gpu,1,,,1,10m,5,30",
        "0,1h,,,,1,,gpu,1,,,1,0,,",
        "0,1h,,,,1,,gpu,1,,,1,,,",
    ]
    workload = parse_rows(rows, "w.csv")
    assert [j.job.checkpoint for j in workload.jobs] == [
        Checkpointing(600.0, 30.0, cost_s=5.0),
        Checkpointing(0.0, 0.0),
        None,
    ]
    path = tmp_path / "out.csv"
    write_workload(path, workload)
    assert [j.job.checkpoint for j in read_workload(path).jobs] == [
        j.job.checkpoint for j in workload.jobs
    ]


def test_workload_without_checkpoints_writes_no_checkpoint_columns(tmp_path: Any) -> None:
    workload = parse_rows([HEADER, "0,1h,,,,1,,gpu,1,,,1"], "w.csv")
    path = tmp_path / "out.csv"
    write_workload(path, workload)
    assert "checkpoint" not in path.read_text()


@pytest.mark.parametrize(
    ("cells", "error"),
    [
        ("-3,,", "w.csv:2: checkpoint_interval: must not be negative, got '-3'"),
        ("10,x,", "w.csv:2: checkpoint_cost: not a duration: 'x'"),
        (",5,", "w.csv:2: checkpoint_cost: a job saves on an interval or a notice"),
        ("10,,2h", "w.csv:2: checkpoint_notice: Input should be less than or equal to 3600"),
    ],
)
def test_bad_workload_columns(cells: str, error: str) -> None:
    rows = [
        HEADER + ",checkpoint_interval,checkpoint_cost,checkpoint_notice",
        "0,1h,,,,1,,gpu,1,,,1," + cells,
    ]
    with pytest.raises(WorkloadError) as caught:
        parse_rows(rows, "w.csv")
    assert any(e.startswith(error) for e in caught.value.errors), caught.value.errors
