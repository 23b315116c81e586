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

#: dumps its own environment, then (a worker) waits for one message on its own address
WORKER = """
import json, os, socket, sys
out = sys.argv[1]
name = f"{os.environ['HETSCHED_GROUP']}-{os.environ['HETSCHED_GROUP_INDEX']}"
env = {k: v for k, v in os.environ.items() if k.startswith("HETSCHED_")}
json.dump(env, open(os.path.join(out, name + ".env"), "w"))
server = socket.create_server((os.environ["HETSCHED_HOST"], int(os.environ["HETSCHED_PORT"])))
server.settimeout(60)
conn, _ = server.accept()
open(os.path.join(out, name + ".got"), "w").write(conn.recv(100).decode())
"""
#: dumps its environment, then sends each worker listed in its peers a message
DRIVER = """
import json, os, socket, sys, time
out = sys.argv[1]
env = {k: v for k, v in os.environ.items() if k.startswith("HETSCHED_")}
json.dump(env, open(os.path.join(out, "driver-0.env"), "w"))
for peer in json.loads(os.environ["HETSCHED_PEERS"])["workers"]:
    deadline = time.time() + 60
    while True:
        try:
            with socket.create_connection((peer["host"], peer["port"]), timeout=5) as s:
                s.sendall(f"hello worker {peer['index']}".encode())
            break
        except OSError:
            assert time.time() < deadline
            time.sleep(0.1)
"""
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
        "command": [sys.executable, "-c", WORKER, str(out)],
        "groups": [
            {"name": "workers", "replicas": 2, "resources": A100},
            {
                "name": "driver",
                "resources": {"cpu": "1", "memory": "512Mi"},
                "command": [sys.executable, "-c", DRIVER, str(out)],
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
