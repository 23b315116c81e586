"""Body of the Ray test of job shapes: a job with groups and an elastic job under
`hetsched up --executor ray`, each task dumping the shape variables it was told; the driver
reaches each worker at the address its peers list."""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from ray_service import Up

from hetsched.ray.testing import ClusterInfo

#: a driver's or a worker's task (tests/peer_task.py; this body runs outside pytest's path)
PEER_TASK = Path(__file__).resolve().parents[1] / "peer_task.py"

#: an elastic job's task: its run, rank and count
COUNT = """
import os, sys
env = os.environ
name = f"{env['HETSCHED_RUN']}-{env['HETSCHED_RANK']}-{env['HETSCHED_REPLICAS']}"
open(os.path.join(sys.argv[1], name + ".count"), "w").write(env["HETSCHED_NODE"])
"""
A100 = {"cpu": "1", "memory": "512Mi", "devices": [{"class": "gpu", "model": "A100", "count": 1}]}


def _groups(up: Up, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True)
    body = {
        "name": "hetero",
        "command": [sys.executable, str(PEER_TASK), "worker", str(out)],
        "groups": [
            {"name": "workers", "replicas": 2, "resources": A100},
            {
                "name": "driver",
                "resources": {"cpu": "1", "memory": "512Mi"},
                "command": [sys.executable, str(PEER_TASK), "driver", str(out)],
            },
        ],
    }
    job_id = up.submit(body)
    done = up.wait([job_id], {"succeeded", "failed"}, timeout_s=120)[job_id]
    return {
        "job": done,
        "envs": {p.stem: json.loads(p.read_text()) for p in out.glob("*.env")},
        "got": {p.stem: p.read_text() for p in out.glob("*.got")},
        "nodes": up.api().get("/v1/nodes").json(),
    }


def _elastic(up: Up, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True)
    body = {
        "name": "elastic",
        "command": [sys.executable, "-c", COUNT, str(out)],
        "resources": A100,
        "replicas": 3,
        "min_replicas": 1,
    }
    job_id = up.submit(body)
    done = up.wait([job_id], {"succeeded", "failed"}, timeout_s=120)[job_id]
    return {"job": done, "counts": {p.stem: p.read_text() for p in out.glob("*.count")}}


def shapes_on_ray(cluster: ClusterInfo) -> dict[str, Any]:
    scratch = Path(cluster.scratch) / "shapes"
    scratch.mkdir(parents=True, exist_ok=True)
    args = ["--executor", "ray", "--ray-address", cluster.address, "--kill-grace", "2"]
    up = Up(scratch / "home", args, scratch / "up.log")
    out: dict[str, Any] = {}
    began = time.monotonic()
    try:
        up.start()
        out["groups"] = _groups(up, scratch / "groups")
        out["elastic"] = _elastic(up, scratch / "elastic")
    except Exception:
        out["error"] = traceback.format_exc() + "\n" + up.tail()
    finally:
        up.stop()
    out["seconds"] = round(time.monotonic() - began, 1)
    return out
