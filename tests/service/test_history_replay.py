"""A recorded ``hetsched up`` history replayed: the real service runs a small workload of
short ``sleep`` jobs on a cluster of simulated nodes, its history is exported from the
store after it stopped, and ``hetsched sim replay --history`` replays it.

The workload (one GPU each; the cluster has three GPUs, all on ``gpu-node``): j0..j5 in one
batch, so they arrive together. j1 and j2 would sleep for minutes: their user cancels them
once the others have ended (so however slow this machine, they hold their GPUs throughout).
Under the recorded profile (fifo) j0, j1 and j2 start at once and j3, j4, j5 follow one
after another on the GPU j0 had; the replay must place every job on the same node and
device, cancel j1 and j2 at the recorded times (the reason their runs ended), and start the
others in the recorded order. Under priority queueing j5 (priority 10) would have started
first, with j0 and j1; j2 then takes the GPU the first of j0 and j5 to end gives back, j3
the other, and j4 follows j3.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from service_fixtures import job_body, service_options, serving
from typer.testing import CliRunner

from hetsched.cli.main import app
from waiting import eventually

runner = CliRunner()

SLEEPS = {"j0": 0.3, "j1": 300, "j2": 300, "j3": 0.3, "j4": 0.3, "j5": 0.3}
CANCELLED = ("j1", "j2")
PRIORITY = {"j5": 10}


def _run_workload(tmp_path: Path) -> Path:
    """Run the workload on the real service (exporting its history to ``live.json`` while it
    runs); returns its home."""
    options = service_options(tmp_path, rate_limit=0)
    bodies = [
        job_body(
            name=name,
            command=["sleep", str(seconds)],
            resources={"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu"}]},
            priority=PRIORITY.get(name, 0),
        )
        for name, seconds in SLEEPS.items()
    ]
    with serving(options) as api:
        answer = api.alice.post("/v1/jobs/batch", json={"jobs": bodies})
        assert answer.status_code == 201, answer.text
        ids = {j["name"]: j["id"] for j in answer.json()["jobs"]}

        def ended(names: list[str], state: str) -> bool:
            """The jobs are in ``state`` and their tasks have ended (a cancelled job's
            tasks stop after it is cancelled)."""
            found = [api.alice.get(f"/v1/jobs/{ids[n]}").json() for n in names]
            tasks = [t["state"] for job in found for t in job["tasks"]]
            over = all(t in ("exited", "stopped") for t in tasks)
            return over and all(job["state"] == state for job in found)

        short = [n for n in SLEEPS if n not in CANCELLED]
        eventually(lambda: ended(short, "succeeded"), timeout=90)
        for name in CANCELLED:
            assert api.alice.post(f"/v1/jobs/{ids[name]}/cancel").status_code == 202
        eventually(lambda: ended(list(CANCELLED), "cancelled"), timeout=60)
        _invoke("history", "export", str(tmp_path / "live.json"), "--home", str(options.home))
    return options.home


def _invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_a_recorded_history_replays_as_it_happened_and_under_another_profile(
    tmp_path: Path,
) -> None:
    home = _run_workload(tmp_path)
    history = tmp_path / "history.json"
    exported = json.loads(
        _invoke("history", "export", str(history), "--home", str(home), "-o", "json")
    )
    assert exported == {"path": str(history), "jobs": 6, "nodes": 3}
    document = json.loads(history.read_text())
    names = {j["id"]: j["spec"]["name"] for j in document["jobs"]}
    assert all("command" not in j["spec"] for j in document["jobs"])
    # read while the service ran, the same history (only the time it was taken differs)
    live = json.loads((tmp_path / "live.json").read_text())
    assert live["jobs"] == document["jobs"] and live["nodes"] == document["nodes"]
    profile = tmp_path / "priority.yaml"
    profile.write_text("name: by-priority\nqueue_sort: priority\n")

    report = json.loads(
        _invoke(
            "sim", "replay", "--history", str(history), "--compare-profiles", str(profile),
            "-o", "json", "--out", str(tmp_path / "report"),
        )
    )  # fmt: skip
    assert report["policies"] == ["recorded (default)", "by-priority"]
    same, other = report["reproduction"]
    assert same["reproduced"], same
    assert same["placements"] == {"same": 6, "explained": 0, "unexplained": 0, "left_out": 0}
    why = {names[j["id"]]: j["why"] for j in same["jobs"] if j["why"]}
    cancelled = ["cancelled by alice: cancelled at the same time in the replay"]
    assert why == dict.fromkeys(CANCELLED, cancelled)
    # the start order of the jobs without a recorded reason (j1 and j2 were cancelled)
    order = [names[j] for j in same["start_order"]["replayed"]]
    assert order == ["j0", "j3", "j4", "j5"]
    assert [names[j] for j in same["start_order"]["recorded"]] == order
    # under priority queueing j5 goes first, and the reproduction says the order differs
    assert [names[j] for j in other["start_order"]["replayed"]] == ["j5", "j0", "j3", "j4"]
    assert not other["reproduced"] and other["start_order"]["first_difference"] == 0
    # side by side: what happened, and each replay's summary
    assert report["recorded"]["jobs"] == 6
    assert report["recorded"]["states"] == {"succeeded": 4, "cancelled": 2}
    replayed_states = [r["summary"]["states"] for r in report["replays"]]
    assert replayed_states == [{"succeeded": 4, "cancelled": 2}] * 2
    assert [r["policy"] for r in report["replays"]] == report["policies"]
    waits = [r["summary"]["wait_s"]["mean"] for r in report["replays"]]
    assert waits[0] > 0 and waits[1] > 0
    for name in ("report.md", "reproduction.json", "waits_recorded_vs_replay.png"):
        assert (tmp_path / "report" / name).is_file()
    markdown = (tmp_path / "report" / "history.md").read_text()
    assert "| recorded (default) | yes | 6 | 0 | same |" in markdown
    # (which GPUs it would have used depends on which of j0 and j5 ran shorter)
    assert re.search(r"\| by-priority \| no \| \d \| \d \| differs at #1 \|", markdown)

    table = _invoke("sim", "replay", "--history", str(history))
    assert "recorded (default): reproduced" in table and "recorded" in table
