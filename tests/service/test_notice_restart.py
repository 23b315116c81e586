"""A restart of the service in the middle of a preemption notice: the task in its notice is
adopted (not killed), SIGTERM follows at the deadline it was first given, not before, its
job's lost work is counted, and the job resumes afterwards. The real service, restarted on
the same home, with a real process."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import psutil
from service_fixtures import Api, over_capacity, service_options

from hetsched.service.testing import running
from waiting import eventually as _until
from waiting import log_lines as _lines

NOTICE_S = 6.0
GPU = {"cpu": "1", "memory": "512Mi", "devices": [{"class": "gpu", "count": 1}]}
CLUSTER = """
nodes:
  - name: gpu-node
    cpu: "16"
    memory: 64Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 1}
"""
PROFILE = """
queue_sort: priority
post_filter: [{name: preemption, args: {grace_s: 3}}]
"""
#: a task that never checkpoints: it notes each signal (with the time) and ends on SIGTERM
TASK = """
import os, signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
def on(signum, frame):
    log.write(f"{signal.Signals(signum).name} {time.time()} {os.environ['HETSCHED_RUN']}\\n")
    if signum == signal.SIGTERM:
        sys.exit(0)
signal.signal(signal.SIGUSR1, on)
signal.signal(signal.SIGTERM, on)
log.write(f"start {time.time()} {os.environ['HETSCHED_RUN']}\\n")
if os.environ["HETSCHED_RUN"] != "1":
    sys.exit(0)
while True:
    time.sleep(0.05)
"""


def test_a_restart_inside_a_notice_keeps_its_deadline(tmp_path: Path) -> None:
    (tmp_path / "gpu.yaml").write_text(CLUSTER)
    (tmp_path / "profile.yaml").write_text(PROFILE)
    options = service_options(
        tmp_path, cluster=[tmp_path / "gpu.yaml"], profile=tmp_path / "profile.yaml"
    )
    signals = tmp_path / "signals.log"
    body = {
        "name": "slow-saver",
        "checkpoint": {"notice_s": f"{NOTICE_S:g}s"},
        "resources": GPU,
        "command": [sys.executable, "-c", TASK, str(signals)],
    }
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
        _until(lambda: any(line[0] == "start" for line in _lines(signals)))
        urgent = {"name": "urgent", "priority": 10, "resources": GPU, "command": ["true"]}
        urgent_id = api.alice.post("/v1/jobs", json=urgent).json()["id"]
        _until(lambda: any(line[0] == "SIGUSR1" for line in _lines(signals)))
        job = api.alice.get(f"/v1/jobs/{job_id}").json()
        pid = job["tasks"][0]["pid"]
        notice = json.loads((tmp_path / "home" / "checkpoints" / job_id / "NOTICE").read_text())
        deadline = float(notice["deadline"])
        alice_token = api.tokens["alice"]
        api.close()
    # the service is gone, mid-notice; the task runs on
    assert psutil.pid_exists(pid)
    assert not any(line[0] == "SIGTERM" for line in _lines(signals))
    with running(options) as svc:
        api = Api(svc)
        alice = api.client(alice_token)
        term = _until(lambda: [line for line in _lines(signals) if line[0] == "SIGTERM"])
        # SIGTERM at the deadline of the notice given before the restart: not at the
        # restart (the old behaviour killed the task at once), not before the deadline
        assert float(term[0][1]) >= deadline - 0.05
        job = api.wait(alice, job_id, {"succeeded", "failed"}, timeout=60)
        assert job["state"] == "succeeded" and job["preemptions"] == 1
        assert [t["run"] for t in job["tasks"]] == [1, 2]
        assert job["tasks"][0]["state"] == "stopped"
        # the run saved nothing: it lost the time from its start to the preemption
        assert job["lost_work_s"] > 0
        urgent_job = api.wait(alice, urgent_id, {"succeeded", "failed"}, timeout=60)
        assert urgent_job["state"] == "succeeded"
        # the urgent job started only once the victim had stopped
        assert urgent_job["first_started_at"] >= float(term[0][1]) - 0.05
        api.close()


def test_a_run_adopted_running_and_preempted_later_counts_its_lost_work(tmp_path: Path) -> None:
    (tmp_path / "gpu.yaml").write_text(CLUSTER)
    (tmp_path / "profile.yaml").write_text(PROFILE)
    options = service_options(
        tmp_path, cluster=[tmp_path / "gpu.yaml"], profile=tmp_path / "profile.yaml"
    )
    signals = tmp_path / "signals.log"
    body = {
        "name": "slow-saver",
        "checkpoint": {"notice_s": "1s"},
        "resources": GPU,
        "command": [sys.executable, "-c", TASK, str(signals)],
    }
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
        _until(lambda: any(line[0] == "start" for line in _lines(signals)))
        alice_token = api.tokens["alice"]
        api.close()
    with running(options) as svc:
        api = Api(svc)
        alice = api.client(alice_token)
        urgent = {"name": "urgent", "priority": 10, "resources": GPU, "command": ["true"]}
        alice.post("/v1/jobs", json=urgent)
        job = api.wait(alice, job_id, {"succeeded", "failed"}, timeout=60)
        assert job["state"] == "succeeded" and job["preemptions"] == 1
        # the adopted run saved nothing: it lost the time from its start (its bind, a moment
        # before) to the preemption
        stopped = next(t for t in job["tasks"] if t["run"] == 1)
        assert 0 < job["lost_work_s"] <= stopped["ended_at"] - stopped["started_at"] + 1
        api.close()


TWO_NODES = """
nodes:
  - name: node-a
    cpu: "16"
    memory: 64Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 2}
  - name: node-b
    cpu: "16"
    memory: 64Gi
    devices:
      - {class: gpu, vendor: nvidia, model: V100, count: 2}
"""
MOVES = """
migration: {min_runtime_s: 0, defrag: {enabled: true, min_interval_s: 0}}
"""
#: as TASK, with the node each run starts on
MOVER = TASK.replace(
    "log.write(f\"start {time.time()} {os.environ['HETSCHED_RUN']}",
    "log.write(f\"start {time.time()} {os.environ['HETSCHED_RUN']} {os.environ['HETSCHED_NODE']}",
)


ONE_GPU = {"cpu": "1", "memory": "512Mi", "devices": [{"class": "gpu", "count": 1}]}


def _two_nodes(tmp_path: Path) -> Any:
    (tmp_path / "two.yaml").write_text(TWO_NODES)
    (tmp_path / "profile.yaml").write_text(MOVES)
    return service_options(
        tmp_path, cluster=[tmp_path / "two.yaml"], profile=tmp_path / "profile.yaml"
    )


def _start_move(api: Api, signals: Path) -> dict[str, str]:
    """The mover runs on one node, a job pinned to the other node's model next to it; then
    a job needing a whole node fits only once the mover has moved next to the pinned one:
    the move starts (its notice signal seen). Returns the job ids and nodes."""
    mover = {
        "name": "mover",
        "checkpoint": {"notice_s": f"{NOTICE_S:g}s"},
        "resources": ONE_GPU,
        "command": [sys.executable, "-c", MOVER, str(signals)],
    }
    mover_id = api.alice.post("/v1/jobs", json=mover).json()["id"]
    origin = _until(lambda: [line for line in _lines(signals) if line[0] == "start"])[0][3]
    model = "A100" if origin == "node-a" else "V100"
    other = {"class": "gpu", "count": 1, "selector": f'device.attributes["model"] != "{model}"'}
    pinned = {
        "name": "pinned",
        "resources": {**ONE_GPU, "devices": [other]},
        "command": ["sleep", "600"],
    }
    pinned_id = api.alice.post("/v1/jobs", json=pinned).json()["id"]
    api.wait(api.alice, pinned_id, {"running"}, timeout=60)
    big = {
        "name": "big",
        "resources": {"cpu": "1", "memory": "512Mi", "devices": [{"class": "gpu", "count": 2}]},
        "command": ["true"],
    }
    big_id = api.alice.post("/v1/jobs", json=big).json()["id"]
    _until(lambda: any(line[0] == "SIGUSR1" for line in _lines(signals)))
    job = api.alice.get(f"/v1/jobs/{mover_id}").json()
    assert job["state"] == "running" and job["migrations"] == 1
    # where it moves is held for it, and shown, from the Migrate on
    moving = [t for t in job["tasks"] if t["run"] == 2]
    assert [t["state"] for t in moving] == ["reserved"]
    assert moving[0]["node"] != origin
    return {
        "mover": mover_id,
        "pinned": pinned_id,
        "big": big_id,
        "origin": origin,
        "target": moving[0]["node"],
        "pid": next(t["pid"] for t in job["tasks"] if t["run"] == 1),
    }


def test_a_restart_inside_a_migration_notice_keeps_the_move(tmp_path: Path) -> None:
    """A job moving to make room for another (defragmentation) when the service restarts:
    its task is adopted, SIGTERM comes at the deadline of the notice given before the
    restart, the job's next run starts where it was moving to (not requeued), and the job
    it made room for starts once the first run has stopped: no device held twice."""
    assert MOVER != TASK
    options = _two_nodes(tmp_path)
    signals = tmp_path / "signals.log"
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        move = _start_move(api, signals)
        mover_id, origin, target = move["mover"], move["origin"], move["target"]
        notice = json.loads((tmp_path / "home" / "checkpoints" / mover_id / "NOTICE").read_text())
        deadline = float(notice["deadline"])
        alice_token = api.tokens["alice"]
        api.close()
    # the service is gone, mid-notice; the task runs on
    assert psutil.pid_exists(int(move["pid"]))
    assert not any(line[0] == "SIGTERM" for line in _lines(signals))
    with running(options) as svc:
        api = Api(svc)
        alice = api.client(alice_token)
        term = _until(lambda: [line for line in _lines(signals) if line[0] == "SIGTERM"])
        assert float(term[0][1]) >= deadline - 0.05
        job = api.wait(alice, mover_id, {"succeeded", "failed"}, timeout=60)
        # it moved as planned: run 2 started where it was moving to, never requeued
        assert job["state"] == "succeeded", job
        assert job["migrations"] == 1 and job["preemptions"] == 0 and job["restarts"] == 0
        assert [(t["run"], t["state"]) for t in job["tasks"]] == [(1, "stopped"), (2, "exited")]
        assert job["tasks"][1]["node"] == target
        starts = [line for line in _lines(signals) if line[0] == "start"]
        assert [(s[2], s[3]) for s in starts] == [("1", origin), ("2", target)]
        history = [h["to"] for h in alice.get(f"/v1/jobs/{mover_id}/why").json()["history"]]
        assert "pending" not in history[1:], history
        big_job = api.wait(alice, move["big"], {"succeeded", "failed"}, timeout=60)
        assert big_job["state"] == "succeeded"
        assert big_job["tasks"][0]["node"] == origin
        assert big_job["first_started_at"] >= float(term[0][1]) - 0.05
        _cancel_and_check(api, alice, svc, move["pinned"])


def test_a_job_cancelled_while_moving_gives_up_where_it_moved(tmp_path: Path) -> None:
    """Cancelled inside its migration notice, the mover never starts where it was moving
    to: the reserved task goes, what it held is released, and the job it made room for
    runs."""
    options = _two_nodes(tmp_path)
    signals = tmp_path / "signals.log"
    with running(options) as svc:
        api = Api(svc)
        move = _start_move(api, signals)
        assert api.alice.post(f"/v1/jobs/{move['mover']}/cancel").status_code == 202
        job = api.wait(api.alice, move["mover"], {"cancelled"}, timeout=60)
        assert [t["run"] for t in job["tasks"]] == [1]
        big_job = api.wait(api.alice, move["big"], {"succeeded", "failed"}, timeout=60)
        assert big_job["state"] == "succeeded"
        assert [line[2] for line in _lines(signals) if line[0] == "start"] == ["1"]
        _cancel_and_check(api, api.alice, svc, move["pinned"])


def _group_of(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except ProcessLookupError:
        return None


def _cancel_and_check(api: Api, client: Any, svc: Any, job_id: str) -> None:
    """Cancel the last job; then nothing is held, and no device ever was twice."""
    client.post(f"/v1/jobs/{job_id}/cancel")
    api.wait(client, job_id, {"cancelled"}, timeout=60)
    history = svc.built.service.store.allocation_history()
    assert over_capacity(history) == []
    assert _until(lambda: not [r for r in svc.built.service.store.live_allocations()])
    api.close()


def test_a_move_whose_task_ended_while_the_service_was_down_arrives_after_the_restart(
    tmp_path: Path,
) -> None:
    """The mover's task dies while the service is down, inside its notice: after the
    restart its run counts as stopped in the first turn and the next run starts where the
    job was moving to (the move is kept, not turned into a requeue)."""
    options = _two_nodes(tmp_path)
    signals = tmp_path / "signals.log"
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        move = _start_move(api, signals)
        alice_token = api.tokens["alice"]
        api.close()
    # the whole task (its wrapper and the command, one process group) ends
    victim = psutil.Process(int(move["pid"]))
    group = [p for p in psutil.process_iter() if _group_of(p) == os.getpgid(victim.pid)]
    os.killpg(os.getpgid(victim.pid), signal.SIGKILL)
    psutil.wait_procs(group, timeout=30)
    with running(options) as svc:
        api = Api(svc)
        alice = api.client(alice_token)
        job = api.wait(alice, move["mover"], {"succeeded", "failed"}, timeout=60)
        assert job["state"] == "succeeded", job
        assert (job["migrations"], job["preemptions"], job["restarts"]) == (1, 0, 0)
        assert [(t["run"], t["state"]) for t in job["tasks"]] == [(1, "stopped"), (2, "exited")]
        assert job["tasks"][0]["reason"] == "ended during a restart"
        assert job["tasks"][1]["node"] == move["target"]
        big_job = api.wait(alice, move["big"], {"succeeded", "failed"}, timeout=60)
        assert big_job["state"] == "succeeded" and big_job["tasks"][0]["node"] == move["origin"]
        _cancel_and_check(api, alice, svc, move["pinned"])


def test_a_reservation_with_nothing_left_to_stop_is_dropped_and_the_job_runs_again(
    tmp_path: Path,
) -> None:
    """A store where a moving job's old run has ended but its reservation is still there
    (no turn writes that; a store edited by hand, say): nothing would ever stop, so the
    move could never arrive. Recovery gives the reservation back and submits the job again:
    it runs, and the service starts (store and core agree)."""
    options = _two_nodes(tmp_path)
    signals = tmp_path / "signals.log"
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        move = _start_move(api, signals)
        alice_token = api.tokens["alice"]
        api.close()
    os.killpg(os.getpgid(int(move["pid"])), signal.SIGKILL)
    db = sqlite3.connect(tmp_path / "home" / "hetsched.db")
    with db:
        db.execute(
            "UPDATE tasks SET state = 'stopped', ended_at = 1 WHERE job_id = ? AND run = 1",
            (move["mover"],),
        )
        db.execute(
            "UPDATE allocations SET live = NULL, released_at = 1 WHERE job_id = ? AND run = 1",
            (move["mover"],),
        )
    db.close()
    with running(options) as svc:
        api = Api(svc)
        alice = api.client(alice_token)
        job = api.wait(alice, move["mover"], {"succeeded", "failed"}, timeout=60)
        assert job["state"] == "succeeded", job
        assert [(t["run"], t["state"]) for t in job["tasks"]] == [(1, "stopped"), (2, "exited")]
        big_job = api.wait(alice, move["big"], {"succeeded", "failed"}, timeout=60)
        assert big_job["state"] == "succeeded"
        _cancel_and_check(api, alice, svc, move["pinned"])
