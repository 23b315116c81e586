"""`hetsched up` as its own process inside a test namespace, and the test tasks it runs.

Used by the bodies of the service tests on Ray (they run inside the namespace, next to a
local Ray cluster). The service is a real `hetsched up` process, so a body can SIGKILL it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

__all__ = ["TASK", "Up", "free_port", "job", "read_starts"]

HETSCHED = str(Path(sys.executable).with_name("hetsched"))

#: a test task: appends where it runs to $STARTS (one line per start), then waits for its
#: release file ($RELEASE/<job>.<task>) at most $WAIT fifths of a second and exits $EXIT;
#: on SIGTERM it says so, takes $TERM_DELAY seconds and exits $TERM_EXIT
TASK = r"""
printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$HETSCHED_JOB_ID" "$HETSCHED_TASK_INDEX" "$HETSCHED_RUN" \
  "$HETSCHED_NODE" "$CUDA_VISIBLE_DEVICES" "$HETSCHED_DEVICES" >> "$STARTS"
echo "started on $HETSCHED_NODE"
trap 'echo "got TERM"; sleep "${TERM_DELAY:-0}"; echo "bye"; exit "${TERM_EXIT:-0}"' TERM
i=0
while [ "$i" -lt "${WAIT:-300}" ] && [ ! -e "$RELEASE/$HETSCHED_JOB_ID.$HETSCHED_TASK_INDEX" ]; do
  sleep 0.2 & wait $!
  i=$((i + 1))
done
echo "done"
exit "${EXIT:-0}"
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def job(name: str, scratch: Path, resources: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A submission running :data:`TASK`; ``env`` entries in ``fields`` add to its own."""
    scratch.mkdir(parents=True, exist_ok=True)
    env = {
        "STARTS": str(scratch / "starts.tsv"),
        "RELEASE": str(scratch / "release"),
        **fields.pop("env", {}),
    }
    return {
        "name": name,
        "resources": resources,
        "command": ["sh", "-c", TASK],
        "env": env,
        **fields,
    }


def read_starts(scratch: Path) -> list[dict[str, Any]]:
    """Every start the tasks wrote, in order."""
    path = scratch / "starts.tsv"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        job_id, task, run, node, cuda, devices = line.split("\t")
        out.append(
            {
                "job": job_id,
                "task": int(task),
                "run": int(run),
                "node": node,
                "cuda": cuda,
                "devices": json.loads(devices),
            }
        )
    return out


class Up:
    """``hetsched up ARGS`` on a free loopback port with its own home, as a process."""

    def __init__(self, home: Path, args: Iterable[str], log: Path) -> None:
        self.home = home
        self.args = list(args)
        self.log = log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.client: httpx.Client | None = None

    def start(self, timeout_s: float = 120.0) -> Up:
        argv = [HETSCHED, "up", "--home", str(self.home), "--port", str(self.port), *self.args]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"hetsched up exited {self.process.returncode}:\n{self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"hetsched up did not answer in {timeout_s} s:\n{self.tail()}")
            time.sleep(0.2)
        token = (self.home / "admin.token").read_text().strip()
        self.client = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        return self

    @property
    def instance(self) -> str:
        return (self.home / "instance").read_text().strip()

    def tail(self, limit: int = 4000) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-limit:]
        return ""

    def api(self) -> httpx.Client:
        assert self.client is not None
        return self.client

    def submit(self, body: dict[str, Any]) -> str:
        answer = self.api().post("/v1/jobs", json=body)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        data: dict[str, Any] = self.api().get(f"/v1/jobs/{job_id}").json()
        return data

    def wait(
        self, job_ids: Iterable[str], states: set[str], timeout_s: float = 90.0
    ) -> dict[str, dict[str, Any]]:
        """Every job in one of ``states``; fails with the jobs as they are after the timeout."""
        ids = list(job_ids)
        deadline = time.monotonic() + timeout_s
        while True:
            jobs = {job_id: self.job(job_id) for job_id in ids}
            if all(j["state"] in states for j in jobs.values()):
                return jobs
            if time.monotonic() > deadline:
                summary = {i: (j["state"], j["reason"]) for i, j in jobs.items()}
                raise AssertionError(f"not all {states} in {timeout_s} s: {summary}\n{self.tail()}")
            time.sleep(0.2)

    def cli_env(self) -> dict[str, str]:
        """The environment the ``hetsched`` command needs to talk to this service."""
        token = (self.home / "admin.token").read_text().strip()
        return {**os.environ, "HETSCHED_URL": self.url, "HETSCHED_TOKEN": token}

    def cli(self, *args: str, timeout_s: float = 60.0) -> str:
        """The ``hetsched`` command against this service; its standard output."""
        done = subprocess.run(
            [HETSCHED, *args],
            env=self.cli_env(),
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        return done.stdout.decode()

    def kill(self) -> None:
        """SIGKILL: the control plane's crash."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.close_client()

    def stop(self) -> None:
        """SIGTERM (tasks keep running; a restart adopts them)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self.close_client()

    def close_client(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
