"""The first minutes: the start-up banner (URL, dashboard, the exact export lines, which
work), "token refused" against "no token", and a bad ``--fake-devices`` file refused at
start and logged once per change afterwards."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from service_fixtures import Api
from typer.testing import CliRunner

from hetsched.agent.watcher import DeviceWatcher
from hetsched.cli.main import app
from hetsched.controlplane.testing import free_port
from hetsched.service.banner import banner, client_url


def test_the_default_banner_needs_no_export(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    home = tmp_path / "hetsched"
    lines = banner("127.0.0.1", 8780, home, home / "admin.token", True, False)
    assert lines[0] == "hetsched up: listening on http://127.0.0.1:8780"
    assert "  dashboard    http://127.0.0.1:8780/ui  (sign in with a token)" in lines
    assert f"  admin token  {home / 'admin.token'}  (written now, mode 0600)" in lines
    assert not any("export" in line for line in lines[:-1])
    assert lines[-1].endswith("no export needed")


def test_a_port_or_home_of_its_own_prints_the_exports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    home = tmp_path / "my home"
    lines = banner("0.0.0.0", 9001, home, home / "admin.token", False, True)
    assert lines[0] == "hetsched up: listening on http://127.0.0.1:9001"
    assert "    export HETSCHED_URL=http://127.0.0.1:9001" in lines
    assert f"    export HETSCHED_TOKEN=\"$(cat '{home / 'admin.token'}')\"" in lines
    assert "  API docs     http://127.0.0.1:9001/docs" in lines
    assert client_url("::", 1) == "http://[::1]:1"


def test_the_printed_exports_work_in_another_shell(tmp_path: Path) -> None:
    """The real `hetsched up` on a port and home of its own: the export lines it prints,
    pasted into a shell, let the CLI list jobs."""
    port = free_port()
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    env.pop("HETSCHED_URL", None)
    env.pop("HETSCHED_TOKEN", None)
    code = "from hetsched.cli.main import main; main()"
    command = [sys.executable, "-c", code, "up", "--port", str(port)]
    command += ["--home", str(tmp_path / "home")]
    log = tmp_path / "stderr.log"
    with (
        log.open("w") as errors,
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, env=env, text=True) as up,
    ):
        assert up.stdout is not None
        try:
            lines = []
            for line in up.stdout:
                lines.append(line.rstrip("\n"))
                if "export HETSCHED_TOKEN" in line:
                    break
            exports = [line.strip() for line in lines if line.strip().startswith("export ")]
            assert exports[0] == f"export HETSCHED_URL=http://127.0.0.1:{port}", lines
            script = "; ".join([*exports, f"{sys.executable} -c '{code}' jobs -o json"])
            done = subprocess.run(
                ["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == "[]"
        finally:
            up.send_signal(signal.SIGINT)
            up.wait(timeout=30)
    # a first start migrates the store without a line about it
    assert "Running upgrade" not in log.read_text() and "alembic" not in log.read_text()


def test_a_wrong_token_is_refused_and_a_missing_one_says_where_tokens_live(
    api: Api, tmp_path: Path
) -> None:
    env = {"HETSCHED_URL": api.url, "HETSCHED_TOKEN": "hs_wrong", "XDG_DATA_HOME": str(tmp_path)}
    result = CliRunner().invoke(app, ["jobs"], env=env)
    assert result.exit_code != 0
    assert "token refused: the token from HETSCHED_TOKEN is unknown to" in result.output
    env["HETSCHED_TOKEN"] = ""
    result = CliRunner().invoke(app, ["jobs"], env=env)
    assert result.exit_code != 0
    assert "no token: set HETSCHED_TOKEN" in result.output
    assert str(tmp_path / "hetsched" / "admin.token") in result.output.replace("\n", "")


@pytest.mark.parametrize("content", [None, "devices: [{class: gpu, count: many}]\n"])
def test_up_refuses_a_missing_or_bad_device_file(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "devices.yaml"
    if content is not None:
        path.write_text(content)
    args = ["up", "--home", str(tmp_path / "home"), "--port", str(free_port())]
    result = CliRunner().invoke(app, [*args, "--fake-devices", str(path)])
    assert result.exit_code == 2
    assert f"--fake-devices: {path}" in result.output
    assert ("cannot read" if content is None else "devices[0].count") in result.output
    assert not (tmp_path / "home").exists()  # refused before anything started


def test_a_bad_edit_is_logged_once_per_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "devices.yaml"
    path.write_text("devices:\n  - {class: gpu, vendor: nvidia, model: T4, count: 2}\n")
    watcher = DeviceWatcher.create("n", ["fake"], fake_file=path)
    watcher.initial()
    caplog.set_level(logging.WARNING, logger="hetsched.agent")

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records]

    path.write_text("devices: [{class: gpu, count: [half")
    for _ in range(3):
        assert watcher.poll() == []
    assert len(said()) == 1 and "fake: discovery failed" in said()[0]
    path.write_text("devices: [{class: gpu, count: x}]\n")
    for _ in range(3):
        watcher.poll()
    assert len(said()) == 2 and "devices[0].count" in said()[1]
    path.write_text("devices:\n  - {class: gpu, vendor: nvidia, model: T4, count: 2}\n")
    watcher.poll()
    watcher.poll()
    assert said()[2:] == ["fake: discovery works again"]
