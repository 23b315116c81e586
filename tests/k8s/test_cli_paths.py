"""Every path option of the ``hetsched k8s`` commands may be relative: it is taken from the
working directory (from the file's folder inside a ``--config`` file), or refused in one
line that names it. Never a traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.k8s.api import for_host
from k8s.apiserver import ApiServer, node_json
from k8s.drakubelet import WAIT_S, DraKubelet
from k8s.kubelet import KubeletDouble
from k8s.test_dra_cli import DEVICES, START_S, _kubeconfig

MAIN = [sys.executable, "-c", "from hetsched.cli.main import main; main()"]


def _stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=START_S)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    return stderr


def test_the_dra_driver_serves_from_relative_folders(short_dir: Path) -> None:
    server = ApiServer().start()
    api = for_host(server.url)
    api.core.create_node(node_json("n1"))
    (short_dir / "devices.yaml").write_text(DEVICES)
    (short_dir / "registry").mkdir()
    _kubeconfig(short_dir / "kc", server)
    kubelet = DraKubelet(short_dir / "registry")
    process = subprocess.Popen(
        [
            *MAIN,
            *["k8s", "dra-driver", "--backend", "fake", "--fake", "devices.yaml"],
            *["--node-name", "n1", "--plugins-dir", "plugins", "--registry-dir", "registry"],
            *["--cdi-dir", "./cdi", "--kubeconfig", "kc"],
        ],
        cwd=short_dir,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        kubelet.wait_for(lambda: bool(kubelet.register_all()), "the driver registered", START_S)
        plugin = kubelet.plugins["hetsched.io"]
        assert plugin.endpoint == str(short_dir / "plugins" / "hetsched.io" / "dra.sock")
        assert (short_dir / "cdi").is_dir()
        _stop(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=WAIT_S)
        kubelet.stop()
        api.close()
        server.stop()


def test_the_device_plugin_serves_from_a_relative_folder(short_dir: Path) -> None:
    (short_dir / "devices.yaml").write_text(DEVICES)
    (short_dir / "dp").mkdir()
    (short_dir / "plugin.yaml").write_text(
        "node_name: n1\nfake_devices: devices.yaml\nkube_api: false\n"
    )
    kubelet = KubeletDouble(short_dir / "dp")
    kubelet.start()
    process = subprocess.Popen(
        [
            *MAIN,
            *["k8s", "device-plugin", "--resource", "hetsched.io/gpu", "--backend", "fake"],
            *["--config", "plugin.yaml", "--plugin-dir", "dp"],
        ],
        cwd=short_dir,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        kubelet.wait_for(lambda: len(kubelet.plugins) == 1, "registered", START_S)
        assert kubelet.allocate("hetsched.io/gpu", ["gpu1"]).envs["CUDA_VISIBLE_DEVICES"] == "1"
        _stop(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        kubelet.stop()


LONG = "d" * 120


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [
                "dra-driver",
                "--backend",
                "fake",
                "--fake",
                "x.yaml",
                "--registry-dir",
                "reg",
                "--plugins-dir",
                LONG,
            ],
            "--plugins-dir: the socket",
        ),
        (
            [
                "dra-driver",
                "--backend",
                "fake",
                "--fake",
                "x.yaml",
                "--registry-dir",
                "reg",
                "--plugins-dir",
                "afile/plugins",
            ],
            "--plugins-dir",
        ),
        (
            [
                "dra-driver",
                "--backend",
                "fake",
                "--fake",
                "x.yaml",
                "--registry-dir",
                "reg",
                "--cdi-dir",
                "afile/cdi",
            ],
            "--cdi-dir",
        ),
        (
            ["dra-driver", "--backend", "fake", "--fake", "x.yaml", "--registry-dir", "nope"],
            "nope is not a directory",
        ),
        (
            [
                "dra-driver",
                "--backend",
                "fake",
                "--fake",
                "x.yaml",
                "--registry-dir",
                "reg",
                "--kubeconfig",
                "missing-kc",
            ],
            "--kubeconfig",
        ),
        (
            [
                "device-plugin",
                "--resource",
                "hetsched.io/gpu",
                "--backend",
                "fake",
                "--fake",
                "x.yaml",
                "--plugin-dir",
                "nope",
            ],
            "nope is not a directory",
        ),
        (["scheduler", "--kubeconfig", "missing-kc"], "--kubeconfig"),
        (["scheduler", "--profile", "missing.yaml"], "missing.yaml"),
        (["extender", "--profile", "missing.yaml"], "missing.yaml"),
    ],
)
def test_relative_paths_are_resolved_or_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.yaml").write_text(DEVICES)
    (tmp_path / "reg").mkdir()
    (tmp_path / "afile").write_text("")
    result = CliRunner().invoke(app, ["k8s", *args])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert message in lines[0]
    assert str(tmp_path) in lines[0]  # the path as it was resolved
