"""The notice and a checkpoint resume on Ray, through `hetsched up --executor ray` with
``--advertise-url``, and the overcommit guard on Ray.

The resume: a checkpointable job on a Ray node is preempted; its agent sends the notice
signal; the task reports its progress and a checkpoint with `hetsched progress` and
`hetsched checkpoint` through the advertised API (its task token), which ends the notice at
once; its next run is told where to resume from."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from ray_service import HETSCHED, Up, job, read_starts

#: run 1 waits; on the notice it reports and saves, on SIGTERM it exits; run 2 says where it
#: resumes from and ends
SCRIPT = r"""
printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$HETSCHED_JOB_ID" "$HETSCHED_TASK_INDEX" "$HETSCHED_RUN" \
  "$HETSCHED_NODE" "$CUDA_VISIBLE_DEVICES" "$HETSCHED_DEVICES" >> "$STARTS"
echo "run $HETSCHED_RUN resume=${HETSCHED_RESUME_FROM:-none} step=${HETSCHED_RESUME_STEP:-none}"
echo "signal=$HETSCHED_NOTICE_SIGNAL api=${HETSCHED_API:+yes} token=${HETSCHED_TASK_TOKEN:+yes}"
[ -n "$HETSCHED_RESUME_FROM" ] && exit 0
trap 'echo notice; "$HS" progress --steps 7 && "$HS" checkpoint --step 7 --path /ckpt/7' USR1
trap 'echo "got TERM"; exit 0' TERM
i=0
while [ "$i" -lt 600 ]; do
  sleep 0.2 & wait $!
  i=$((i + 1))
done
exit 3
"""


def _started(up: Up, scratch: Path, job_id: str, run: int, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(s["job"] == job_id and s["run"] == run for s in read_starts(scratch)):
        assert time.monotonic() < deadline, f"{job_id} run {run} not started: {up.job(job_id)}"
        time.sleep(0.1)


def notice_and_resume(up: Up, scratch: Path) -> dict[str, Any]:
    a100s = {
        "cpu": "1",
        "memory": "1Gi",
        "devices": [{"class": "gpu", "model": "A100", "count": 2}],
    }
    saves = job(
        "saves",
        scratch,
        a100s,
        priority=0,
        preemptible=True,
        checkpoint={"notice_s": 30, "interval_s": 600},
        env={"HS": HETSCHED},
    )
    saves["command"] = ["sh", "-c", SCRIPT]
    low = up.submit(saves)
    _started(up, scratch, low, 1)
    time.sleep(1.0)  # its traps are set
    asked = time.monotonic()
    high = up.submit(job("high", scratch, a100s, priority=100))
    _started(up, scratch, high, 1)
    # the 30 s notice ended as soon as the checkpoint was reported
    high_started_s = time.monotonic() - asked
    (scratch / "release").mkdir(exist_ok=True)
    (scratch / "release" / f"{high}.0").touch()
    _started(up, scratch, low, 2)
    jobs = up.wait([low, high], {"succeeded", "failed"})
    return {
        "high_started_s": round(high_started_s, 2),
        "low": jobs[low],
        "high": jobs[high],
        "log": up.cli("logs", low),
    }


#: allocates and touches 300 MiB, then waits
HOG = "import time; b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(120)"


def overcommit(up: Up, scratch: Path) -> dict[str, Any]:
    """A best-effort task that uses far more memory than it asked for, next to a guaranteed
    one, both on a Ray node: the node's agent measures them and kills the best-effort one;
    the alert reaches the control plane's guard (`/v1/alerts`) and the job's history."""
    calm = up.submit(job("calm", scratch, {"cpu": "1", "memory": "256Mi"}))
    hog = up.submit(
        {
            "name": "hog",
            "command": [sys.executable, "-c", HOG],
            "best_effort": True,
            "resources": {"cpu": "1", "memory": "128Mi"},
        }
    )
    jobs = up.wait([hog], {"succeeded", "failed"})
    _started(up, scratch, calm, 1)
    calm_then = up.job(calm)
    (scratch / "release").mkdir(exist_ok=True)
    (scratch / "release" / f"{calm}.0").touch()
    jobs.update(up.wait([calm], {"succeeded", "failed"}))
    # the agent's alert comes with its next answer, taken at the next guard round
    deadline = time.monotonic() + 20
    while not any(a["job_id"] == hog for a in up.api().get("/v1/alerts").json()["guard"]):
        assert time.monotonic() < deadline, "the guard's alert did not come"
        time.sleep(0.1)
    return {
        "hog": jobs[hog],
        "calm_then": calm_then["state"],
        "calm": jobs[calm],
        "causes": [h["cause"] for h in up.api().get(f"/v1/jobs/{hog}/why").json()["history"]],
        "alerts": up.api().get("/v1/alerts").json()["guard"],
    }
