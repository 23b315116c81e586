"""Bodies of the `hetsched ray local` tests; they run inside a fresh namespace."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil


def _first_line(process: subprocess.Popen[bytes], timeout_s: float) -> str:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    buffer = b""
    while b"\n" not in buffer:
        left = deadline - time.monotonic()
        if left <= 0 or not selector.select(left):
            raise TimeoutError(f"no address line in {timeout_s} s")
        chunk = os.read(process.stdout.fileno(), 4096)
        if not chunk:
            raise RuntimeError(f"hetsched ray local ended first (rc {process.wait()})")
        buffer += chunk
    return buffer.split(b"\n", 1)[0].decode()


def cli_local_cluster(nodes: str) -> dict[str, Any]:
    """Start `hetsched ray local`, read its first line, look at the cluster from a Ray
    driver, SIGTERM it, and report what is left in the namespace."""
    import ray

    hetsched = str(Path(sys.executable).parent / "hetsched")
    before = {p.name for p in Path("/tmp").glob("hsray-*")}
    process = subprocess.Popen(
        [hetsched, "ray", "local", "--nodes", nodes, "--fake-devices"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    address = _first_line(process, 150)
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    nodes_seen = [
        {"labels": n["Labels"], "resources": n["Resources"], "alive": n["Alive"]}
        for n in ray.nodes()
    ]
    ray.shutdown()
    # /tmp is shared with other tests: only the directories that appeared are this cluster's
    workdirs = sorted({p.name for p in Path("/tmp").glob("hsray-*")} - before)
    process.send_signal(signal.SIGTERM)
    rc = process.wait(timeout=90)
    mine = {os.getpid(), 1}
    left = [
        " ".join(p.cmdline())[:100]
        for p in psutil.process_iter()
        if p.pid not in mine and p.status() != psutil.STATUS_ZOMBIE
    ]
    workdirs_after = sorted({p.name for p in Path("/tmp").glob("hsray-*")} & set(workdirs))
    return {
        "address": address,
        "nodes": nodes_seen,
        "rc": rc,
        "left": left,
        "workdirs": workdirs,
        "workdirs_after": workdirs_after,
    }
