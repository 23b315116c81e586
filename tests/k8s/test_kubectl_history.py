"""The Kubernetes scheduler's history from kubectl's JSON: its pods (placed, started and
ended when their conditions and containers say, on the devices of their annotation) and the
nodes, replayed as it happened.

Two nodes with one GPU each. p0 and p1 come at once and run 10 s and 20 s, on n1 and n2;
p2 comes 2 s later and waits for n1, runs there and fails; p3 is another scheduler's, and
p4 still waits. Replayed under fifo, p0, p1 and p2 go where they went (p2's failure is the
recorded reason its outcome differs), p4 is left out and p3 is not in the history.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from apiserver import gpus, node_json, pod_json
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.k8s.history import history_from_kubectl
from hetsched.sim.history import history_inputs
from hetsched.sim.history_replay import replay_history, reproduction
from hetsched.sim.replay import policy_from_name

runner = CliRunner()
T0 = 1_796_000_000.0


def _at(seconds: float) -> str:
    return datetime.fromtimestamp(T0 + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(name: str, created: float, run: tuple[str, float, float, int] | None, **kw: Any) -> Any:
    pod = pod_json(name, devices={"gpu": 1}, **kw)
    pod["metadata"]["creationTimestamp"] = _at(created)
    if run is None:
        pod["status"] = {"phase": "Pending"}
        return pod
    node, started, ended, code = run
    pod["spec"]["nodeName"] = node
    pod["metadata"]["annotations"]["hetsched.io/assigned-devices"] = json.dumps(
        [{"id": f"{node}-gpu0", "share": 1000}]
    )
    terminated = {"startedAt": _at(started), "finishedAt": _at(ended), "exitCode": code}
    pod["status"] = {
        "phase": "Succeeded" if code == 0 else "Failed",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": _at(started)}
        ],
        "startTime": _at(started),
        "containerStatuses": [{"name": "main", "state": {"terminated": terminated}}],
    }
    return pod


def _cluster() -> tuple[list[Any], list[Any]]:
    nodes = [node_json(n, devices=gpus(n, 1)) for n in ("n1", "n2")]
    for node in nodes:
        node["metadata"]["creationTimestamp"] = _at(-3600)
    pods = [
        _pod("p0", 0, ("n1", 0, 10, 0)),
        _pod("p1", 0, ("n2", 0, 20, 0)),
        _pod("p2", 2, ("n1", 10, 15, 1)),
        _pod("p3", 3, ("n2", 20, 30, 0), scheduler="default-scheduler"),
        _pod("p4", 4, None),
    ]
    return pods, nodes


def test_pods_and_nodes_replay_as_they_ran() -> None:
    pods, nodes = _cluster()
    document = history_from_kubectl(pods, nodes, "hetsched", T0 + 60)
    assert [j.id for j in document.jobs] == ["default/p0", "default/p1", "default/p2", "default/p4"]
    p2 = document.jobs[2]
    assert (p2.submit_s, p2.state, p2.exit_code) == (2.0, "failed", 1)
    assert (p2.runs[0].node, p2.runs[0].devices, p2.runs[0].ended_s) == ("n1", ("n1-gpu0",), 15.0)
    inputs = history_inputs(document)
    assert list(inputs.left_out) == ["default/p4"]
    result = reproduction(document, inputs, replay_history(inputs, policy_from_name("fifo")))
    assert result["reproduced"]
    assert result["placements"] == {"same": 3, "explained": 0, "unexplained": 0, "left_out": 1}
    assert result["start_order"]["replayed"] == ["default/p0", "default/p1"]


def test_export_from_kubectl_files_and_replay(tmp_path: Path) -> None:
    pods, nodes = _cluster()
    (tmp_path / "pods.json").write_text(json.dumps({"kind": "List", "items": pods}))
    (tmp_path / "nodes.json").write_text(json.dumps({"kind": "List", "items": nodes}))
    out = tmp_path / "h.json"
    args = ["--kubectl-pods", str(tmp_path / "pods.json")]
    args += ["--kubectl-nodes", str(tmp_path / "nodes.json"), "-o", "json"]
    result = runner.invoke(app, ["history", "export", str(out), *args])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"path": str(out), "jobs": 4, "nodes": 2}
    # the scheduler's profile is not in the API server: the replay asks for it
    result = runner.invoke(app, ["sim", "replay", "--history", str(out)])
    assert result.exit_code == 2 and "the history records no profile" in result.output
    profile = tmp_path / "fifo.yaml"
    profile.write_text("name: fifo\n")
    result = runner.invoke(
        app, ["sim", "replay", "--history", str(out), "--profile", str(profile), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    [reproduced] = json.loads(result.output)["reproduction"]
    assert reproduced["policy"] == "fifo" and reproduced["reproduced"]


def test_a_bad_kubectl_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "pods.json").write_text('{"kind": "Pod"}')
    (tmp_path / "nodes.json").write_text('{"items": []}')
    args = ["--kubectl-pods", str(tmp_path / "pods.json")]
    args += ["--kubectl-nodes", str(tmp_path / "nodes.json")]
    result = runner.invoke(app, ["history", "export", str(tmp_path / "h.json"), *args])
    assert result.exit_code == 2
    assert "--kubectl-pods" in result.output and "expected kubectl's JSON" in result.output
    result = runner.invoke(app, ["history", "export", "x.json", "--kubectl-pods", "p.json"])
    assert result.exit_code == 2 and "go together" in result.output
