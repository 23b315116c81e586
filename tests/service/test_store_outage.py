"""A store that cannot be written is an outage, not a verdict on jobs (in process, no root
needed; ``test_store_faults.py`` makes the faults for real).

The outage is injected with SQLite triggers that refuse writes with the message SQLite
gives for a full disk: every submission and every turn that records a job's change fails
as on a full disk, reads still work. Dropping the triggers is the disk getting space
again."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx
from service_fixtures import Api, job_body, service_options, serving

TERMINAL = {"succeeded", "failed", "cancelled", "rejected"}
_FULL = "database or disk is full"


def _fill(home: Path) -> None:
    db = sqlite3.connect(home / "hetsched.db")
    with db:
        for table in ("jobs", "transitions", "tasks", "store_marks"):
            for op in ("INSERT", "UPDATE"):
                db.execute(
                    f"CREATE TRIGGER full_{table}_{op.lower()} BEFORE {op} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{_FULL}'); END"
                )
    db.close()


def _free(home: Path) -> None:
    db = sqlite3.connect(home / "hetsched.db")
    with db:
        names = db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
        for (name,) in names:
            if name.startswith("full_"):
                db.execute(f"DROP TRIGGER {name}")
    db.close()


def _metric(api: Api, name: str) -> float:
    text = api.admin.get("/metrics").text
    return float(next(x for x in text.splitlines() if x.startswith(name + " ")).split()[-1])


def _until(check: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_full_store_pauses_scheduling_and_fails_no_job(tmp_path: Path) -> None:
    options = service_options(tmp_path)
    with serving(options) as api:
        body = job_body(command=["sleep", "1"], max_restarts=0)
        running = [api.alice.post("/v1/jobs", json=body).json()["id"] for _ in range(2)]
        for job_id in running:
            api.wait(api.alice, job_id, {"running"})
        _fill(options.home)
        # a submission is refused with the reason, never half-taken
        answer = api.alice.post("/v1/jobs", json=job_body(name="refused"))
        assert answer.status_code == 503, answer.text
        assert answer.headers["retry-after"] == "2"
        assert answer.json()["detail"].startswith("store unavailable: disk full on ")
        assert answer.json()["detail"].endswith("hetsched.db")
        # the running tasks end while the store cannot take it: the loop pauses
        _until(lambda: api.admin.get("/readyz").status_code == 503)
        time.sleep(1.5)
        health = httpx.get(f"{api.url}/healthz").json()
        assert health["ok"] is True and health["store"]["ok"] is False
        assert "disk full" in health["store"]["reason"]
        assert _metric(api, "hetsched_store_unavailable") == 1.0
        # reads that need only the store's reading go on
        assert api.alice.get(f"/v1/jobs/{running[0]}").status_code == 200
        alerts = api.admin.get("/v1/alerts").json()
        assert [a["kind"] for a in alerts["loop"]] == ["store_unavailable"]
        assert alerts["held"] == {} and alerts["wedged"] is None
        _free(options.home)
        for job_id in running:
            job = api.wait(api.alice, job_id, TERMINAL)
            assert (job["state"], job["restarts"]) == ("succeeded", 0), job
        after = api.alice.post("/v1/jobs", json=job_body(name="after"))
        assert after.status_code == 201
        assert api.wait(api.alice, after.json()["id"], TERMINAL)["state"] == "succeeded"
        assert api.admin.get("/readyz").status_code == 200
        kinds = [a["kind"] for a in api.admin.get("/v1/alerts").json()["loop"]]
        assert kinds[0] == "store_unavailable" and "store_recovered" in kinds
        assert "turn_failed" not in kinds and "gave_up" not in kinds
        assert _metric(api, "hetsched_store_unavailable") == 0.0
        assert _metric(api, "hetsched_loop_turn_failures_total") == 0.0
        assert _metric(api, "hetsched_store_outages_total") >= 1.0
        # the refused submission never reached the core: no job of that name exists
        names = {j["name"] for j in api.admin.get("/v1/jobs", params={"all": True}).json()}
        assert "refused" not in names


def test_a_cancel_during_an_outage_is_refused_and_works_after(tmp_path: Path) -> None:
    options = service_options(tmp_path)
    with serving(options) as api:
        job_id = api.alice.post("/v1/jobs", json=job_body(command=["sleep", "30"])).json()["id"]
        api.wait(api.alice, job_id, {"running"})
        db = sqlite3.connect(options.home / "hetsched.db")
        with db:
            db.execute(
                "CREATE TRIGGER full_jobs_update BEFORE UPDATE ON jobs "
                f"BEGIN SELECT RAISE(ABORT, '{_FULL}'); END"
            )
        db.close()
        refused = api.alice.post(f"/v1/jobs/{job_id}/cancel")
        assert refused.status_code == 503 and "retry-after" in refused.headers
        assert api.alice.get(f"/v1/jobs/{job_id}").json()["state"] == "running"
        _free(options.home)
        assert api.alice.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        assert api.wait(api.alice, job_id, TERMINAL)["state"] == "cancelled"


def test_a_damaged_page_is_a_503_and_an_alert_not_a_500(tmp_path: Path) -> None:
    options = service_options(tmp_path)
    with serving(options) as api:
        job_id = api.alice.post("/v1/jobs", json=job_body()).json()["id"]
        api.wait(api.alice, job_id, TERMINAL)
        db = sqlite3.connect(options.home / "hetsched.db")
        with db:  # what SQLite says when a page it reads is damaged
            db.execute(
                "CREATE TRIGGER damaged BEFORE INSERT ON jobs "
                "BEGIN SELECT RAISE(ABORT, 'database disk image is malformed'); END"
            )
        db.close()
        answer = api.alice.post("/v1/jobs", json=job_body(name="damaged"))
        assert answer.status_code == 503, answer.text
        detail = answer.json()["detail"]
        assert detail.startswith("store damaged: database disk image is malformed")
        assert detail.endswith("restore a backup")
        assert api.admin.get("/readyz").status_code == 503
        alerts = api.admin.get("/v1/alerts").json()
        assert [a["kind"] for a in alerts["loop"]] == ["store_damaged"]
        # what the damage does not touch still answers
        assert api.alice.get(f"/v1/jobs/{job_id}").status_code == 200
