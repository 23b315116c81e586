"""``hetsched k8s dra-driver``: the command as a real process (killed and started again),
and its refusals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.k8s.api import KubeClusterAPI, for_host
from k8s.apiserver import ApiServer, node_json
from k8s.drakubelet import WAIT_S, DraKubelet

#: a process's start (imports of gRPC and the Kubernetes client) is slow on a loaded machine
START_S = 90.0
DEVICES = "devices:\n  - {class: gpu, vendor: nvidia, model: T4, count: 2, attributes: {numa: 0}}\n"


def _kubeconfig(path: Path, server: ApiServer) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "double", "cluster": {"server": server.url}}],
                "users": [{"name": "test", "user": {}}],
                "contexts": [{"name": "test", "context": {"cluster": "double", "user": "test"}}],
                "current-context": "test",
            }
        )
    )
    return path


def _allocated_claim(api: KubeClusterAPI, device: str) -> str:
    body = {
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.x"}}]}
        },
    }
    claim = json.loads(
        api.resource.create_namespaced_resource_claim("default", body, _preload_content=False).data
    )
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "hetsched.io", "pool": "n1", "device": device}
                ]
            }
        }
    }
    assert api.replace_resource_claim_status("default", "c", claim) is not None
    return str(claim["metadata"]["uid"])


def _start(command: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(command, stderr=subprocess.PIPE, text=True)


def test_the_command_serves_survives_a_kill_and_stops_on_sigterm(short_dir: Path) -> None:
    server = ApiServer().start()
    api = for_host(server.url)
    api.core.create_node(node_json("n1"))
    (short_dir / "devices.yaml").write_text(DEVICES)
    registry = short_dir / "registry"
    registry.mkdir()
    (short_dir / "driver.yaml").write_text(
        "node_name: n1\nfake_devices: devices.yaml\nsocket_check_interval_s: 0.05\n"
        f"plugins_dir: {short_dir / 'plugins'}\ncdi_dir: {short_dir / 'cdi'}\n"
    )
    command = [
        sys.executable,
        "-c",
        "from hetsched.cli.main import main; main()",
        "k8s",
        "dra-driver",
        "--backend",
        "fake",
        "--config",
        str(short_dir / "driver.yaml"),
        "--registry-dir",
        str(registry),
        "--kubeconfig",
        str(_kubeconfig(short_dir / "kubeconfig", server)),
    ]
    kubelet = DraKubelet(registry)
    process = _start(command)
    try:
        kubelet.wait_for(lambda: bool(kubelet.register_all()), "the driver registered", START_S)
        kubelet.wait_for(
            lambda: bool(server.store.items("resourceslices", None)), "its slice", START_S
        )
        uid = _allocated_claim(api, "gpu1")
        answer = kubelet.prepare("hetsched.io", [("default", uid, "c")])
        assert [d.device for d in answer[uid][0]] == ["gpu1"]
        # a crash: no chance to clean up; a new process takes over the same directories
        process.kill()
        process.communicate(timeout=WAIT_S)
        process = _start(command)
        kubelet.wait_for(
            lambda: any(p.endpoint for p in kubelet.register_all()), "registered again", START_S
        )
        api.resource.delete_namespaced_resource_claim("c", "default", _preload_content=False)
        assert kubelet.prepare("hetsched.io", [("default", uid, "c")]) == answer
        assert kubelet.unprepare("hetsched.io", [("default", uid, "c")]) == {uid: ""}
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=START_S)
        assert process.returncode == 0, stderr
        assert kubelet.sockets() == []  # the registration socket is gone: deregistered
        assert not (short_dir / "plugins" / "hetsched.io" / "dra.sock").exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=WAIT_S)
        kubelet.stop()
        api.close()
        server.stop()


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, ["k8s", "dra-driver", *args])


def test_print_slices_shows_what_would_be_published(tmp_path: Path) -> None:
    (tmp_path / "devices.yaml").write_text(DEVICES)
    fake = str(tmp_path / "devices.yaml")
    result = _run(
        "--backend", "fake", "--fake", fake, "--node-name", "n1", "--print-slices", "-o", "json"
    )
    assert result.exit_code == 0, result.output
    (body,) = json.loads(result.stdout)
    assert body["spec"]["pool"]["name"] == "n1"
    assert [d["name"] for d in body["spec"]["devices"]] == ["gpu0", "gpu1"]
    table = _run("--backend", "fake", "--fake", fake, "--node-name", "n1", "--print-slices")
    assert table.exit_code == 0
    assert "n1-hetsched-io-0" in table.stdout
    assert "T4" in table.stdout


@pytest.mark.parametrize(
    ("args", "config", "message"),
    [
        (["--backend", "quantum"], None, "unknown backend 'quantum'"),
        (["--backend", "fake"], None, "needs a device file"),
        (["--backend", "fake", "--fake", "x.yaml"], "driver_name: Not_A_Domain\n", "driver_name"),
        (["--backend", "fake", "--fake", "x.yaml"], "shared: [gpu]\n", "shared"),
        (
            ["--backend", "fake", "--fake", "x.yaml", "--registry-dir", "/nonexistent/hs"],
            None,
            "/nonexistent/hs is not a directory",
        ),
    ],
)
def test_refusals(tmp_path: Path, args: list[str], config: str | None, message: str) -> None:
    if config is not None:
        (tmp_path / "driver.yaml").write_text(config)
        args = [*args, "--config", str(tmp_path / "driver.yaml")]
    result = _run(*args)
    assert result.exit_code != 0
    assert message in result.output


def test_help_explains_the_command() -> None:
    result = CliRunner().invoke(app, ["k8s", "dra-driver", "--help"])
    assert result.exit_code == 0
    for word in ("ResourceSlices", "--print-slices", "--registry-dir", "--cdi-dir"):
        assert word in result.output
