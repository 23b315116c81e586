"""``hetsched k8s device-plugin``: the command as a process, and its refusals."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetsched.cli.main import app
from k8s.kubelet import WAIT_S, KubeletDouble


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hs-cli-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_command_serves_registers_and_stops_on_sigterm(short_dir: Path) -> None:
    (short_dir / "devices.yaml").write_text(
        "devices:\n  - {class: gpu, vendor: nvidia, model: T4, count: 2, attributes: {numa: 0}}\n"
    )
    (short_dir / "plugin.yaml").write_text(
        "node_name: n1\nshared_slots: 2\nfake_devices: devices.yaml\nkube_api: false\n"
        "socket_check_interval_s: 0.05\n"
    )
    kubelet = KubeletDouble(short_dir)
    kubelet.start()
    command = [
        sys.executable,
        "-c",
        "from hetsched.cli.main import main; main()",
        "k8s",
        "device-plugin",
        "--resource",
        "hetsched.io/gpu",
        "--backend",
        "fake",
        "--config",
        str(short_dir / "plugin.yaml"),
        "--plugin-dir",
        str(short_dir),
    ]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        kubelet.wait_for(lambda: len(kubelet.plugins) == 2, "both resources registered")
        listed = kubelet.wait_list("hetsched.io/gpu-shared", bool, "the shared list")
        assert [d.id for d in listed] == ["gpu0::0", "gpu0::1", "gpu1::0", "gpu1::1"]
        answer = kubelet.allocate("hetsched.io/gpu", ["gpu1"])
        assert answer.envs["CUDA_VISIBLE_DEVICES"] == "1"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=WAIT_S)
        assert process.returncode == 0, stderr
        assert "registered hetsched.io/gpu with the kubelet" in stderr
        assert not (short_dir / "hetsched-gpu.sock").exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        kubelet.stop()


@pytest.mark.parametrize(
    ("args", "config", "message"),
    [
        (["--resource", "gpu"], None, "extended resource name"),
        (["--resource", "kubernetes.io/gpu"], None, "extended resource name"),
        (["--resource", "hetsched.io/gpu", "--backend", "rocm"], None, "unknown backend 'rocm'"),
        (["--resource", "hetsched.io/gpu", "--backend", "fake"], None, "needs a device file"),
        (["--resource", "hetsched.io/gpu"], "shared_slots: -1\n", "shared_slots: Input should be"),
        (["--resource", "hetsched.io/gpu"], "sockets: 3\n", "sockets: Extra inputs"),
        (
            ["--resource", "hetsched.io/gpu", "--plugin-dir", "/nonexistent/dp"],
            None,
            "/nonexistent/dp is not a directory",
        ),
    ],
)
def test_refusals(tmp_path: Path, args: list[str], config: str | None, message: str) -> None:
    if config is not None:
        (tmp_path / "plugin.yaml").write_text(config)
        args = [*args, "--config", str(tmp_path / "plugin.yaml")]
    result = CliRunner().invoke(app, ["k8s", "device-plugin", *args])
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())
