"""A history as a replay's inputs, and the reproduction's verdict, on documents written by
hand: run times from the last run, cancels at their time, jobs that never ran left out,
nodes that joined and left as cluster changes, and differences explained or not."""

from __future__ import annotations

from typing import Any

from hetsched.model.history import HistoryDocument, parse_history
from hetsched.scheduler.events import NodeAdded, NodeRemoved
from hetsched.sim.history import CANCEL_MARGIN_S, history_inputs, start_order
from hetsched.sim.history_replay import recorded_summary, replay_history, reproduction
from hetsched.sim.replay import policy_from_name

GPU = {"name": "train", "resources": {"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu"}]}}


def _node(name: str, joined: float = 0.0, left: float | None = None) -> dict[str, Any]:
    entry = {"name": name, "cpu": "8", "memory": "32Gi", "devices": [{"class": "gpu"}]}
    return {"entry": entry, "device_ids": [f"{name}/gpu0"], "joined_s": joined, "left_s": left}


def _run(node: str, start: float, end: float | None, **more: Any) -> dict[str, Any]:
    run = {"run": 0, "task": 0, "node": node, "devices": [f"{node}/gpu0"], "shares": [1000]}
    run |= {"bound_s": start, "started_s": start, "ended_s": end, "state": "exited"}
    return run | more


def _job(job_id: str, submit: float, state: str, runs: list[Any], **more: Any) -> dict[str, Any]:
    """A job as the export writes it: its first start and end are its runs'."""
    job = {"id": job_id, "user": "alice", "spec": GPU, "submit_s": submit, "state": state}
    if runs:
        job["first_started_s"] = min(r["started_s"] for r in runs)
        job["ended_s"] = max(r["ended_s"] for r in runs)
    return job | {"runs": runs} | more


def _document(nodes: list[Any], jobs: list[Any], taken: float = 100.0) -> HistoryDocument:
    return parse_history(
        {
            "format": "hetsched-history",
            "version": 1,
            "source": "test",
            "origin": 0.0,
            "taken_s": taken,
            "profile": {},
            "nodes": nodes,
            "jobs": jobs,
        }
    )


def test_run_times_cancels_and_jobs_that_never_ran() -> None:
    requeued = [
        _run("n1", 0.0, 4.0, state="stopped"),
        _run("n1", 6.0, 9.0, run=1),
        _run("n1", 6.0, 11.0, run=1, task=1),
    ]
    document = _document(
        [_node("n1"), _node("n2", joined=5.0, left=50.0)],
        [
            _job("twice", 0.0, "succeeded", requeued, restarts=1),
            _job("cancelled", 1.0, "cancelled", [_run("n2", 5.0, 8.0)], cancelled_s=8.0),
            _job("waiting", 2.0, "pending", []),
            _job("gave-up", 2.0, "cancelled", [], cancelled_s=3.0),
        ],
    )
    inputs = history_inputs(document)
    durations = {j.job.id: j.duration_s for j in inputs.workload.jobs}
    # the last run's longest task; a cancelled run's length and the margin; none ran: 0
    assert durations == {"twice": 5.0, "cancelled": 3.0 + CANCEL_MARGIN_S, "gave-up": 0.0}
    assert inputs.cancellations == [(8.0, "cancelled"), (3.0, "gave-up")]
    assert list(inputs.left_out) == ["waiting"]
    assert [n.name for n in inputs.nodes] == ["n1"]
    changes = [(c.time, type(c.event)) for c in inputs.changes]
    assert changes == [(5.0, NodeAdded), (50.0, NodeRemoved)]


def test_same_placements_reproduce_and_others_are_explained_or_not() -> None:
    # default profile on two equal nodes: the first job goes to n1, the second to n2
    nodes = [_node("n1"), _node("n2")]
    same = _document(
        nodes,
        [
            _job("a", 0.0, "succeeded", [_run("n1", 0.0, 10.0)]),
            _job("b", 0.0, "succeeded", [_run("n2", 0.0, 20.0)]),
            _job("c", 1.0, "succeeded", [_run("n1", 10.0, 15.0)]),
        ],
    )
    inputs = history_inputs(same)
    watched = replay_history(inputs, policy_from_name("fifo"))
    result = reproduction(same, inputs, watched)
    assert result["reproduced"] and result["placements"]["same"] == 3
    assert result["start_order"]["replayed"] == ["a", "b", "c"] == start_order(same.jobs)
    summary = recorded_summary(same, inputs)
    assert summary["wait_s"]["max"] == 9.0 and summary["makespan_s"] == 20.0
    # GPU-seconds 10 + 20 + 5 of 2 GPUs over 20 s
    assert summary["utilization"]["gpu"] == 35 / 40

    # the service put a on n2 (it failed there) and b on n1: a is explained, b is not
    swapped = _document(
        nodes,
        [
            _job("a", 0.0, "failed", [_run("n2", 0.0, 10.0, exit_code=3)], exit_code=3),
            _job("b", 0.0, "succeeded", [_run("n1", 0.0, 20.0)]),
        ],
    )
    inputs = history_inputs(swapped)
    result = reproduction(swapped, inputs, replay_history(inputs, policy_from_name("fifo")))
    assert not result["reproduced"]
    assert result["placements"] == {"same": 0, "explained": 1, "unexplained": 1, "left_out": 0}
    why = {j["id"]: j["why"] for j in result["jobs"]}
    assert why["a"] == ["failed (exit 3): a replay runs it for the same time and succeeds"]
    assert why["b"] == []


def test_a_node_that_left_takes_its_job_away_in_the_replay_too() -> None:
    # a ran on n1 until n1 left at 5 (its task lost), then again on n2 for 10 s
    runs = [
        _run("n1", 0.0, 5.0, state="lost", reason="node n1 left"),
        _run("n2", 5.0, 15.0, run=1),
    ]
    document = _document(
        [_node("n1", left=5.0), _node("n2")],
        [_job("a", 0.0, "succeeded", runs, restarts=1)],
    )
    inputs = history_inputs(document)
    watched = replay_history(inputs, policy_from_name("fifo"))
    [outcome] = watched.replay.result.jobs
    assert (outcome.restarts, outcome.first_start, outcome.end) == (1, 0.0, 15.0)
    result = reproduction(document, inputs, watched)
    assert result["reproduced"] and result["placements"]["same"] == 1
    assert result["jobs"][0]["why"] == [
        "lost 1 task(s) with their node: node n1 left",
        "restarted 1 time(s) after a failure or a lost node",
    ]


def test_a_dependency_on_a_job_left_out_is_dropped() -> None:
    after = {**GPU, "after": [{"job": "etl", "state": "succeeded"}, {"job": "waiting"}]}
    document = _document(
        [_node("n1")],
        [
            _job("etl", 0.0, "succeeded", [_run("n1", 0.0, 2.0)]),
            _job("waiting", 0.0, "pending", []),
            _job("train", 0.0, "succeeded", [_run("n1", 2.0, 3.0)], spec=after),
        ],
    )
    inputs = history_inputs(document)
    train = next(j.job for j in inputs.workload.jobs if j.job.id == "train")
    assert [d.job for d in train.after] == ["etl"] and list(inputs.left_out) == ["waiting"]
