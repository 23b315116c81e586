"""Fixtures: the real service (SQLite file, uvicorn on a loopback port, real processes) and
a PostgreSQL server when one can be found or started."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from hetsched.service.server import Options
from hetsched.service.testing import Running, running

CLUSTER = """
nodes:
  - name: gpu-node
    cpu: "16"
    memory: 64Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 2}
      - {class: gpu, vendor: amd, model: MI250, count: 1}
  - name: fpga-node
    cpu: "8"
    memory: 32Gi
    devices:
      - {class: fpga, vendor: xilinx, model: U250, count: 1}
"""

QUEUES = """
queues:
  - name: default
  - name: team-a
    users: [alice, admin]
    quota: {gpu: 2, cpu: "8"}
  - name: small
    quota: {gpu: 1}
"""


def write_config(directory: Path) -> tuple[Path, Path]:
    cluster = directory / "cluster.yaml"
    cluster.write_text(CLUSTER)
    queues = directory / "queues.yaml"
    queues.write_text(QUEUES)
    return cluster, queues


def service_options(tmp_path: Path, **overrides: object) -> Options:
    cluster, queues = write_config(tmp_path)
    values: dict[str, object] = {
        "home": tmp_path / "home",
        "cluster": [cluster],
        "queues": queues,
        "kill_grace_s": 1.0,
        "node_name": "local",
    }
    values.update(overrides)
    return Options(**values)  # type: ignore[arg-type]


class Api:
    """httpx clients for the admin and two users, alice and bob."""

    def __init__(self, svc: Running) -> None:
        self.svc = svc
        self.url = svc.url
        self._clients: list[httpx.Client] = []
        self.admin = self.client(svc.admin_token)
        self.tokens: dict[str, str] = {}
        for user in ("alice", "bob"):
            answer = self.admin.post("/v1/tokens", json={"user": user})
            assert answer.status_code == 201, answer.text
            self.tokens[user] = answer.json()["token"]
        self.alice = self.client(self.tokens["alice"])
        self.bob = self.client(self.tokens["bob"])

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=30)
        self._clients.append(client)
        return client

    def close(self) -> None:
        for client in self._clients:
            client.close()

    def wait(
        self, client: httpx.Client, job_id: str, states: set[str], timeout: float = 30
    ) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            job = client.get(f"/v1/jobs/{job_id}").json()
            if job["state"] in states:
                return job  # type: ignore[no-any-return]
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} stuck in {job['state']}: {job}")
            time.sleep(0.05)


@contextmanager
def serving(options: Options) -> Iterator[Api]:
    """The service run with ``options`` and the clients of its admin, alice and bob
    (``api.svc``: the running service); all stopped on exit."""
    with running(options) as svc:
        client = Api(svc)
        try:
            yield client
        finally:
            client.close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    with serving(service_options(tmp_path)) as client:
        yield client


def job_body(**overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "name": "job",
        "command": ["true"],
        "resources": {"cpu": "1", "memory": "1Gi"},
    }
    body.update(overrides)
    return body


def over_capacity(history: list[Any]) -> list[str]:
    """Moments of an allocation history (rows with ``device_id``, ``share``,
    ``allocated_at`` and ``released_at``) at which a device held more than its capacity."""
    points: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
    for row in history:
        end = row["released_at"] if row["released_at"] is not None else float("inf")
        # a release sorts before an allocation at the same instant: [start, end) intervals
        points[row["device_id"]].append((row["allocated_at"], 1, row["share"]))
        points[row["device_id"]].append((end, 0, -row["share"]))
    problems = []
    for device, items in points.items():
        held = 0
        for when, _order, delta in sorted(items):
            held += delta
            if held > 1000:
                problems.append(f"{device} held {held}/1000 at {when}")
    return problems
