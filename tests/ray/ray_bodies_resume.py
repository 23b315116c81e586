"""The notice and a checkpoint resume on Ray, through `hetsched up --executor ray` with
``--advertise-url``: a checkpointable job on a Ray node is preempted; its agent sends the
notice signal; the task reports its progress and a checkpoint with `hetsched progress` and
`hetsched checkpoint` through the advertised API (its task token), which ends the notice at
once; its next run is told where to resume from."""

from __future__ import annotations

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
