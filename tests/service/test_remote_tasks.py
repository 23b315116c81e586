"""Tasks on other machines (the Ray executor): with ``--advertise-url`` they are told the
https API, their token, the CA bundle as PEM text and where to resume, and nothing that
names the service's home (no checkpoint directory or notice file is made for them); the
local protocol is the same as before, plus the CA. A link to Ray agents off this machine
without Ray's own TLS is warned of at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import job
from hetsched.cluster.placement import Placement
from hetsched.controlplane import CheckpointProtocol
from hetsched.drivers import Start, Stop
from hetsched.keys import TaskKey
from hetsched.model.checkpoint import Checkpointing, SavedCheckpoint
from hetsched.service.engines import ray_link_in_clear

API = "https://cp.example:8780"
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir(mode=0o700, parents=True)
    return tmp_path / "home"


def _start(resume: SavedCheckpoint | None = None) -> Start:
    return Start(TaskKey("j1", 0, 2), Placement("ray-node", 1000, 1024), resume)


def test_a_remote_task_is_told_how_to_report_and_where_to_resume(tmp_path: Path) -> None:
    protocol = CheckpointProtocol(_home(tmp_path), API, PEM, remote=True)
    spec = Checkpointing(interval_s=30.0, signal="SIGUSR2")
    resume = SavedCheckpoint(time=5.0, run=1, step=400, path="s3://bucket/ckpt-400")
    env = protocol.env(_start(resume), job("j1", checkpoint=spec), None, None)
    token = env.pop("HETSCHED_TASK_TOKEN")
    assert len(token) >= 32 and protocol.tokens.check(TaskKey("j1", 0, 2), token)
    assert env == {
        "HETSCHED_API": API,
        "HETSCHED_CA_PEM": PEM,
        "HETSCHED_NOTICE_SIGNAL": "SIGUSR2",
        "HETSCHED_CHECKPOINT_INTERVAL": "30",
        "HETSCHED_RESUME_FROM": "s3://bucket/ckpt-400",
        "HETSCHED_RESUME_STEP": "400",
    }
    assert not (tmp_path / "home" / "checkpoints").exists()
    stop = Stop(TaskKey("j1", 0, 2), Placement("ray-node", 1000, 1024), 10.0, 5.0, "preempted")
    assert protocol.notify(stop, job("j1", checkpoint=spec), now=100.0) == "SIGUSR2"
    assert not (tmp_path / "home" / "checkpoints").exists()
    protocol.watch("j1")
    assert protocol.next_due() is None  # nothing to poll for a remote task


def test_a_remote_task_without_a_checkpoint_is_told_only_how_to_report(tmp_path: Path) -> None:
    protocol = CheckpointProtocol(_home(tmp_path), API, None, remote=True)
    env = protocol.env(_start(), job("j1"), None, None)
    assert set(env) == {"HETSCHED_API", "HETSCHED_TASK_TOKEN", "HETSCHED_NOTICE_SIGNAL"}


def test_a_local_task_gets_the_ca_with_its_checkpoint_directory(tmp_path: Path) -> None:
    protocol = CheckpointProtocol(_home(tmp_path), API, PEM)
    env = protocol.env(_start(), job("j1"), None, "/usr/bin")
    assert env["HETSCHED_CA_PEM"] == PEM and env["HETSCHED_API"] == API
    assert Path(env["HETSCHED_CHECKPOINT_DIR"]).is_dir()
    assert "HETSCHED_CA_PEM" not in CheckpointProtocol(_home(tmp_path / "h2"), API).env(
        _start(), job("j1"), None, "/usr/bin"
    )


@pytest.mark.parametrize(
    ("address", "env", "warned"),
    [
        ("127.0.0.1:6379", {}, False),
        ("[::1]:6379", {}, False),
        ("localhost:6379", {}, False),
        ("10.0.0.5:6379", {}, True),
        ("10.0.0.5:6379", {"RAY_USE_TLS": "0"}, True),
        ("10.0.0.5:6379", {"RAY_USE_TLS": "1"}, False),
        ("head.example:6379", {"RAY_USE_TLS": "true"}, False),
    ],
)
def test_a_ray_link_off_this_machine_without_rays_tls_is_warned_of(
    address: str, env: dict[str, str], warned: bool
) -> None:
    warning = ray_link_in_clear(address, env)
    assert (warning is not None) == warned
    if warning is not None:
        assert f"the Ray cluster at {address} is reached without TLS" in warning
        assert "RAY_USE_TLS=1" in warning
