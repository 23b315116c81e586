"""Fixtures: members (real `hetsched up` services, in-process or as processes) and a
federation in front of them, all on 127.0.0.1."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from hetsched.federation.server import FederationOptions
from hetsched.federation.testing import RunningFederation, running_federation
from hetsched.service.server import Options
from hetsched.service.testing import Running, running

#: three members, each with its own device model
MEMBER_DEVICES = {
    "a": {"model": "A100", "count": 2},
    "b": {"model": "V100", "count": 4},
    "c": {"model": "T4", "count": 2},
}


def cluster_yaml(member: str, cpu: str = "16", memory: str = "64Gi") -> str:
    devices = MEMBER_DEVICES[member]
    return yaml.safe_dump(
        {
            "nodes": [
                {
                    "name": f"{member}-node",
                    "cpu": cpu,
                    "memory": memory,
                    "devices": [
                        {
                            "class": "gpu",
                            "vendor": "nvidia",
                            "model": devices["model"],
                            "count": devices["count"],
                            "attributes": {"memory_gib": 40},
                        }
                    ],
                }
            ]
        }
    )


def member_options(tmp: Path, member: str, **overrides: Any) -> Options:
    folder = tmp / f"member-{member}"
    folder.mkdir(parents=True, exist_ok=True)
    cluster = folder / "cluster.yaml"
    cluster.write_text(cluster_yaml(member))
    values: dict[str, Any] = {
        "home": folder / "home",
        "cluster": [cluster],
        "kill_grace_s": 1.0,
        "node_name": f"{member}-local",
        "rate_limit": 0.0,
    }
    values.update(overrides)
    return Options(**values)


def members_yaml(
    tmp: Path,
    urls: dict[str, str],
    tokens: dict[str, str],
    lease: float = 4.0,
    labels: dict[str, dict[str, str]] | None = None,
    name: str = "fed",
    timeout: float = 2.0,
    margin: float = 0.5,
) -> Path:
    members = []
    for member, url in urls.items():
        token_file = tmp / f"{member}.token"
        token_file.write_text(tokens[member])
        members.append(
            {
                "name": member,
                "kind": "hetsched",
                "url": url,
                "token_file": str(token_file),
                "timeout": f"{timeout:g}s",
                "labels": (labels or {}).get(member, {"region": f"r-{member}"}),
            }
        )
    path = tmp / f"members-{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {"federation": name, "lease": f"{lease}s", "margin": f"{margin:g}s", "members": members}
        )
    )
    return path


@dataclass
class Fed:
    running: RunningFederation
    client: httpx.Client
    members: dict[str, Running]
    #: every wait's timeout is multiplied by it (``load_factor``, where the lease is too)
    slow: float = 1.0

    def wait(
        self, what: str, check: Callable[[], Any], timeout: float = 30.0, every: float = 0.05
    ) -> Any:
        """Until ``check`` answers (its answer), asking every ``every`` seconds: an
        AssertionError after ``timeout`` (times ``slow``)."""
        deadline = time.monotonic() + timeout * self.slow
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(every)

    def states(self) -> dict[str, str]:
        return {m["name"]: m["state"] for m in self.running.built.runner.members_view}

    def ready(self, timeout: float = 30.0) -> None:
        names = set(self.members) or set(self.states())
        self.wait(
            "members ready",
            lambda: all(self.states().get(n) == "ready" for n in names),
            timeout,
        )

    def job(self, job_id: str) -> dict[str, Any]:
        answer = self.client.get(f"/v1/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    def until(self, job_id: str, states: set[str], timeout: float = 30.0) -> dict[str, Any]:
        return self.wait(  # type: ignore[no-any-return]
            f"job {job_id} in {states}",
            lambda: (j := self.job(job_id))["state"] in states and j,
            timeout,
        )


@contextmanager
def federation(
    tmp: Path,
    members: list[str] = ["a", "b", "c"],  # noqa: B006 - read only
    lease: float = 4.0,
    profile: Path | None = None,
    labels: dict[str, dict[str, str]] | None = None,
    queues: Path | None = None,
    db: str | None = None,
) -> Iterator[Fed]:
    """In-process members and an in-process federation in front of them."""
    with ExitStack() as stack:
        running_members = {
            name: stack.enter_context(running(member_options(tmp, name))) for name in members
        }
        path = members_yaml(
            tmp,
            {n: r.url for n, r in running_members.items()},
            {n: r.admin_token for n, r in running_members.items()},
            lease,
            labels,
        )
        options = FederationOptions(
            members=path,
            home=tmp / "federation",
            profile=profile,
            queues=queues,
            rate_limit=0.0,
            db=db,
        )
        fed = stack.enter_context(running_federation(options))
        client = stack.enter_context(
            httpx.Client(
                base_url=fed.url,
                headers={"Authorization": f"Bearer {fed.admin_token}"},
                timeout=30,
            )
        )
        yield Fed(fed, client, running_members)


def task(
    out: Path,
    tag: str,
    seconds: float = 1.0,
    slots: int = 0,
    slot_count: int = 0,
    gate: Path | None = None,
) -> list[str]:
    """A command that checks, with locks the kernel drops when a process dies (even by
    SIGKILL), that no other run of the same task of ``tag`` runs at the same time (else it
    writes ``DOUBLE``), and, with ``slots``, that it can take that many of ``slot_count``
    quota slots (else ``QUOTA``); it writes start and end lines, tagged ``tag.<task>``,
    with its node to ``out/events``. With ``gate``, it runs until that file exists (at most
    two minutes), then ``seconds`` more."""
    d = str(out)
    take = ""
    assert slots <= 5, "one file descriptor per slot, 3 to 7 (sh takes single digits)"
    for fd in range(3, 3 + slots):
        take += (
            f'got=""; for s in $(seq 0 {slot_count - 1}); do exec {fd}>"{d}/slot-$s.lock"; '
            f"if flock -n {fd}; then got=$s; break; fi; done; "
            f'[ -n "$got" ] || echo "QUOTA {tag}" >> "{d}/events"; '
        )
    me = f"{tag}.$HETSCHED_TASK_INDEX"
    script = (
        f'exec 8>"{d}/job-{me}.lock"; flock -n 8 || echo "DOUBLE {me}" >> "{d}/events"; '
        + take
        + f'echo "start {me} $HETSCHED_NODE $(date +%s.%N)" >> "{d}/events"; '
        + (
            f'n=0; while [ ! -e "{gate}" ] && [ $n -lt 600 ]; do sleep 0.2; n=$((n+1)); done; '
            if gate is not None
            else ""
        )
        + f"sleep {seconds}; "
        + f'echo "end {me} $HETSCHED_NODE $(date +%s.%N)" >> "{d}/events"'
    )
    return ["sh", "-c", script]


@dataclass(frozen=True)
class Line:
    kind: str
    tag: str
    node: str
    at: float


def events(out: Path) -> list[Line]:
    """The lines the tasks wrote, in order."""
    path = out / "events"
    lines = []
    for text in path.read_text().splitlines() if path.exists() else []:
        parts = text.split()
        if parts[0] in ("start", "end"):
            lines.append(Line(parts[0], parts[1], parts[2], float(parts[3])))
        else:
            lines.append(Line(parts[0], parts[1], "", 0.0))
    return lines


def load_factor(cap: float = 10.0) -> float:
    """How many times slower than a quiet machine this one runs now, read from the 1-minute
    load per core (at least 1, at most ``cap``). The heavy end-to-end tests scale their
    lease and their deadlines by it: on a machine the test suite shares, a lease of a few
    seconds lapses for want of CPU, not for a fault, and a fenced member's jobs run again,
    so a fixed short lease turns load into an endless failover."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return min(cap, max(1.0, load))


def job_body(name: str = "job", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "command": ["true"],
        "resources": {"cpu": "1", "memory": "1Gi"},
    }
    body.update(overrides)
    return body
