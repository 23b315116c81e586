"""Bodies of the `hetsched ray local` tests; they run inside a fresh namespace."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil


def _lines(process: subprocess.Popen[bytes], count: int, timeout_s: float) -> list[str]:
    """The first ``count`` lines of the process's output, within ``timeout_s``."""
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    buffer = b""
    while buffer.count(b"\n") < count:
        left = deadline - time.monotonic()
        if left <= 0 or not selector.select(left):
            raise TimeoutError(f"not {count} lines in {timeout_s} s: {buffer!r}")
        chunk = os.read(process.stdout.fileno(), 65536)
        if not chunk:
            raise RuntimeError(f"hetsched ray local ended first (rc {process.wait()})")
        buffer += chunk
    return buffer.decode().split("\n")[:count]


def cli_local_cluster(nodes: str) -> dict[str, Any]:
    """Start `hetsched ray local`, read its first line, look at the cluster from a Ray
    driver, SIGTERM it, and report what is left in the namespace."""
    import ray

    hetsched = str(Path(sys.executable).parent / "hetsched")
    process = subprocess.Popen(
        [hetsched, "ray", "local", "--nodes", nodes, "--fake-devices", "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    address, document = _lines(process, 2, 150)
    workdir = Path(json.loads(document)["workdir"])
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    nodes_seen = [
        {"labels": n["Labels"], "resources": n["Resources"], "alive": n["Alive"]}
        for n in ray.nodes()
    ]
    ray.shutdown()
    workdir_before = workdir.is_dir()
    process.send_signal(signal.SIGTERM)
    rc = process.wait(timeout=90)
    mine = {os.getpid(), 1}
    left = [
        " ".join(p.cmdline())[:100]
        for p in psutil.process_iter()
        if p.pid not in mine and p.status() != psutil.STATUS_ZOMBIE
    ]
    return {
        "address": address,
        "nodes": nodes_seen,
        "rc": rc,
        "left": left,
        "workdir": [workdir_before, workdir.exists()],
    }
