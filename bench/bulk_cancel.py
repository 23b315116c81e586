"""Cancelling many jobs: one request per job against one ``POST /v1/jobs/cancel``.

Starts ``hetsched up`` (SQLite, loopback) on a one-GPU cluster, holds the GPU with one job,
and submits N jobs that wait for it (batches). Then cancels them one request at a time
(``POST /v1/jobs/{id}/cancel``, what the CLI did before), submits N more and cancels those
with one ``POST /v1/jobs/cancel`` choosing them by filter. Each figure is the time from the
first request to the last answer, and to the last job's ``cancelled`` state in the store.

    .venv/bin/python bench/bulk_cancel.py [--jobs 4020]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import tempfile
import time
from pathlib import Path

import httpx

from service_submit import _BODY, _HOG, _cancel_and_wait, start_server


def _submit(client: httpx.Client, jobs: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, jobs, 1000):
        batch = [_BODY] * min(1000, jobs - start)
        answer = client.post("/v1/jobs/batch", json={"jobs": batch})
        answer.raise_for_status()
        ids += [j["id"] for j in answer.json()["jobs"]]
    return ids


def _until_cancelled(client: httpx.Client, jobs: int) -> None:
    """Wait until no job but the holder is live."""
    while True:
        live = client.get("/v1/jobs", params={"state": "pending", "limit": 1}).json()
        if not live:
            return
        time.sleep(0.05)


def run(jobs: int) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="hetsched-bench-")) / "home"
    home.parent.mkdir(parents=True, exist_ok=True)
    proc, url = start_server(home, "FULL")
    try:
        token = (home / "admin.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
            hog = client.post("/v1/jobs", json=_HOG).json()["id"]
            ids = _submit(client, jobs)
            started = time.perf_counter()
            for job_id in ids:
                client.post(f"/v1/jobs/{job_id}/cancel").raise_for_status()
            one_by_one = time.perf_counter() - started
            _until_cancelled(client, jobs)
            one_by_one_done = time.perf_counter() - started
            _submit(client, jobs)
            started = time.perf_counter()
            answer = client.post("/v1/jobs/cancel", json={"states": ["pending"]})
            answer.raise_for_status()
            bulk = time.perf_counter() - started
            assert len(answer.json()["cancelled"]) == jobs, answer.json()["already_ended"]
            _until_cancelled(client, jobs)
            bulk_done = time.perf_counter() - started
        _cancel_and_wait(url, headers, hog)
        return {
            "one_by_one_s": one_by_one,
            "one_by_one_done_s": one_by_one_done,
            "bulk_s": bulk,
            "bulk_done_s": bulk_done,
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(home.parent, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4020)
    args = parser.parse_args()
    figures = run(args.jobs)
    print(
        f"{args.jobs} pending jobs: one request each {figures['one_by_one_s']:.2f} s "
        f"(all cancelled {figures['one_by_one_done_s']:.2f} s); one POST /v1/jobs/cancel "
        f"{figures['bulk_s']:.2f} s (all cancelled {figures['bulk_done_s']:.2f} s)"
    )


if __name__ == "__main__":
    main()
