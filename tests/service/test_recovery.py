"""Restarts on the same home: running tasks are adopted (same pid and start time), tasks
that ended meanwhile are accounted from their exit file, vanished ones are lost and go
through the restart policy. The service stops here without stopping its tasks, as it does
on SIGTERM; test_crash.py does the same with kill -9."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import psutil
from service_fixtures import Api, job_body, service_options

from hetsched.service.testing import running


def _running_task(api: Api, client_name: str, job_id: str) -> dict:
    client = getattr(api, client_name)
    deadline = time.monotonic() + 20
    while True:
        job = client.get(f"/v1/jobs/{job_id}").json()
        tasks = [t for t in job.get("tasks", []) if t["state"] == "running" and t["pid"]]
        if tasks:
            return tasks[0]  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def test_a_running_task_is_adopted_after_a_restart(tmp_path: Path) -> None:
    options = service_options(tmp_path)
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        job_id = api.alice.post("/v1/jobs", json=job_body(command=["sleep", "2"])).json()["id"]
        task = _running_task(api, "alice", job_id)
        alice_token = api.tokens["alice"]
        api.close()
    assert psutil.pid_exists(task["pid"])
    with running(options) as svc:
        api = Api(svc)
        alice = api.client(alice_token)
        job = api.wait(alice, job_id, {"succeeded", "failed"}, timeout=30)
        assert job["state"] == "succeeded"
        assert [t["pid"] for t in job["tasks"]] == [task["pid"]]
        assert job["run"] == 1
        api.close()


def test_a_task_that_ended_while_the_service_was_down_keeps_its_exit_code(
    tmp_path: Path,
) -> None:
    options = service_options(tmp_path)
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        body = job_body(command=["sh", "-c", "sleep 0.5; exit 7"])
        job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
        _running_task(api, "alice", job_id)
        api.close()
    time.sleep(1.0)
    with running(options) as svc:
        api = Api(svc)
        job = api.wait(api.admin, job_id, {"succeeded", "failed"})
        assert job["state"] == "failed" and job["exit_code"] == 7
        api.close()


def test_a_vanished_task_is_lost_and_its_restart_policy_applies(tmp_path: Path) -> None:
    options = service_options(tmp_path)
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        body = job_body(
            command=["sh", "-c", 'test "$HETSCHED_RUN" -ge 2 || sleep 30'],
            restart_policy="on_failure",
            max_restarts=1,
        )
        job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
        task = _running_task(api, "alice", job_id)
        api.close()
    os.killpg(task["pid"], signal.SIGKILL)
    time.sleep(0.2)
    with running(options) as svc:
        api = Api(svc)
        job = api.wait(api.admin, job_id, {"succeeded", "failed"})
        assert job["state"] == "succeeded" and job["run"] == 2 and job["restarts"] == 1
        first = next(t for t in job["tasks"] if t["run"] == 1)
        assert first["state"] == "lost"
        api.close()


def test_pending_jobs_and_cancel_requests_survive_a_restart(tmp_path: Path) -> None:
    options = service_options(tmp_path)
    big = {"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "count": 2, "model": "A100"}]}
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        hog = api.alice.post("/v1/jobs", json=job_body(command=["sleep", "30"], resources=big))
        hog_id = hog.json()["id"]
        _running_task(api, "alice", hog_id)
        waiting = api.alice.post("/v1/jobs", json=job_body(name="w", resources=big)).json()["id"]
        assert api.alice.post(f"/v1/jobs/{hog_id}/cancel").status_code == 202
        api.close()
    with running(options) as svc:
        api = Api(svc)
        assert api.wait(api.admin, hog_id, {"cancelled"})["state"] == "cancelled"
        assert api.wait(api.admin, waiting, {"succeeded"})["state"] == "succeeded"
        history = svc.built.service.store.allocation_history()
        live = [a for a in history if a["live"]]
        assert live == []
        api.close()


def test_a_task_spawned_but_never_recorded_is_found_by_its_key(tmp_path: Path) -> None:
    """A crash between committing a Bind and recording the pid leaves a task ``starting``
    without a pid while its process runs: the restart finds it by the key in its
    environment and adopts it instead of losing it."""
    options = service_options(tmp_path)
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        job_id = api.alice.post("/v1/jobs", json=job_body(command=["sleep", "2"])).json()["id"]
        task = _running_task(api, "alice", job_id)
        api.close()
    db = sqlite3.connect(options.home / "hetsched.db")
    with db:
        db.execute("UPDATE tasks SET state = 'starting', pid = NULL, pid_started = NULL")
    db.close()
    with running(options) as svc:
        api = Api(svc)
        job = api.wait(api.admin, job_id, {"succeeded", "failed"})
        assert job["state"] == "succeeded" and job["run"] == 1
        assert [t["pid"] for t in job["tasks"]] == [task["pid"]]
        api.close()


def test_a_running_task_recorded_without_a_pid_is_found_by_its_key(tmp_path: Path) -> None:
    """An executor that learns pids after starting (the Ray executor) records a running task
    with pid 0: a restart finds it by its key and adopts it (run 1, the same process)."""
    options = service_options(tmp_path)
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        job_id = api.alice.post("/v1/jobs", json=job_body(command=["sleep", "2"])).json()["id"]
        task = _running_task(api, "alice", job_id)
        api.close()
    db = sqlite3.connect(options.home / "hetsched.db")
    with db:
        db.execute("UPDATE tasks SET pid = 0, pid_started = 0")
    db.close()
    with running(options) as svc:
        api = Api(svc)
        job = api.wait(api.admin, job_id, {"succeeded", "failed"})
        assert job["state"] == "succeeded" and job["run"] == 1
        # adopted, not lost (a lost task fails the job: its policy restarts nothing)
        assert [(t["state"], t["exit_code"]) for t in job["tasks"]] == [("exited", 0)]
        assert job["tasks"][0]["started_at"] == task["started_at"]
        api.close()


def test_a_stopping_task_recorded_without_a_pid_is_killed_by_its_key(tmp_path: Path) -> None:
    """A task being stopped when the service died, with no pid recorded, is found by its key
    and killed for good at the restart; its job is not left running."""
    options = service_options(tmp_path)
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        body = job_body(command=["sleep", "60"])
        job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
        task = _running_task(api, "alice", job_id)
        api.close()
    db = sqlite3.connect(options.home / "hetsched.db")
    with db:
        db.execute("UPDATE tasks SET state = 'stopping', pid = 0, pid_started = 0")
    db.close()
    process = psutil.Process(task["pid"])
    with running(options) as svc:
        api = Api(svc)
        process.wait(timeout=20)
        job = api.wait(api.admin, job_id, {"running", "pending"}, timeout=30)
        stopped = [t for t in job["tasks"] if t["run"] == 1]
        assert [t["state"] for t in stopped] == ["stopped"]
        assert stopped[0]["reason"] == "stopped during a restart: it was being stopped"
        api.close()


def test_a_task_bound_but_never_spawned_runs_again_without_a_failure(tmp_path: Path) -> None:
    """A crash between committing a Bind and spawning the task (a standby pair's leader
    killed mid-turn) leaves it ``starting``, without a pid or an exit file: its command
    never ran, so the restart puts the run back in the queue, with no failure counted
    against the job (restart policy ``never``)."""
    body = job_body(command=["sh", "-c", 'test "$HETSCHED_RUN" -ge 2 || sleep 30'])
    job = _restart_with_task(service_options(tmp_path), body, None)
    assert job["state"] == "succeeded" and job["run"] == 2 and job["restarts"] == 0, job
    first = next(t for t in job["tasks"] if t["run"] == 1)
    assert "not started: the service stopped before it spawned" in str(first), first


def _restart_with_task(options: Any, body: dict[str, Any], exit_text: str | None) -> dict[str, Any]:
    """Run ``body`` until its task runs, stop the service, kill the task's group, leave
    its exit file holding ``exit_text`` (None: no exit file, as if never spawned) and its
    row ``starting`` without a pid (the crash came before the pid was recorded), and
    restart; the job as it ends."""
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
        task = _running_task(api, "alice", job_id)
        exit_file = svc.built.service.executor.exit_file(job_id, 0, 1)  # type: ignore[union-attr]
        api.close()
    os.killpg(task["pid"], signal.SIGKILL)
    time.sleep(0.2)
    if exit_text is None:
        exit_file.unlink()
    else:
        exit_file.write_text(exit_text)
    db = sqlite3.connect(options.home / "hetsched.db")
    with db:
        db.execute("UPDATE tasks SET state = 'starting', pid = NULL, pid_started = NULL")
    db.close()
    with running(options) as svc:
        api = Api(svc)
        job: dict[str, Any] = api.wait(api.admin, job_id, {"succeeded", "failed"}, timeout=60)
        api.close()
    return job


def test_a_task_killed_with_its_exit_file_made_but_not_spawned_runs_again(
    tmp_path: Path,
) -> None:
    """The crash came between making the exit file (the wrapper's stdin) and spawning the
    wrapper: the file is there but empty, and the wrapper never said it started the
    command, so the run goes back to the queue, no failure counted."""
    body = job_body(command=["sh", "-c", 'test "$HETSCHED_RUN" -ge 2 || sleep 30'])
    job = _restart_with_task(service_options(tmp_path), body, "")
    assert job["state"] == "succeeded" and job["run"] == 2 and job["restarts"] == 0, job
    first = next(t for t in job["tasks"] if t["run"] == 1)
    assert "not started: the service stopped before it spawned" in str(first), first


def test_a_task_whose_wrapper_started_the_command_and_vanished_is_lost(
    tmp_path: Path,
) -> None:
    """The wrapper said it started the command (``started`` in the exit file) and is gone
    without an exit status: the command ran, so the run is lost (restart policy never:
    the job fails), never silently run again."""
    body = job_body(command=["sh", "-c", 'test "$HETSCHED_RUN" -ge 2 || sleep 30'])
    job = _restart_with_task(service_options(tmp_path), body, "started\n")
    assert job["state"] == "failed" and job["run"] == 1, job
    assert "lost: its process was gone after a restart" in str(job["tasks"]), job
