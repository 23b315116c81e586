"""``main`` leaves what the command built to the operating system at exit."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hetsched.cli.main import main


@pytest.mark.parametrize("argv", [["version"], ["no-such-command"]], ids=["ok", "error"])
def test_main_freezes_the_heap_when_the_command_ends(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["hetsched", *argv])
    gc.unfreeze()
    try:
        with pytest.raises(SystemExit):
            main()
        assert gc.get_freeze_count() > 0  # the shutdown collection will skip them
    finally:
        gc.unfreeze()


def test_output_and_exit_code_survive_the_frozen_shutdown() -> None:
    argv = [sys.executable, "-c", "from hetsched.cli.main import main; main()"]
    done = subprocess.run([*argv, "version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip()
    bad = subprocess.run([*argv, "no-such-command"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "No such command" in bad.stderr


@pytest.mark.parametrize(
    ("argv", "loaded"),
    [(["version"], True), (["no-such-command"], True), (["--no-such-option"], False)],
    ids=["ok", "unknown-command", "bad-option"],
)
def test_the_collector_runs_once_the_command_is_loaded(
    argv: list[str], loaded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """main pauses the collector for typer's start only: a command (``hetsched up`` runs
    for days) runs with it on, and a run that loads none leaves it as it found it."""
    from hetsched.cli import main as cli

    during: list[bool] = []
    load = cli.load_command

    def spy(*args: object) -> object:
        during.append(gc.isenabled())  # typer's start: paused
        command = load(*args)  # type: ignore[arg-type]
        during.append(gc.isenabled())  # the command: collected
        return command

    monkeypatch.setattr(cli, "load_command", spy)
    monkeypatch.setattr(sys, "argv", ["hetsched", *argv])
    assert gc.isenabled()
    try:
        with pytest.raises(SystemExit):
            main()
        assert gc.isenabled()
    finally:
        gc.unfreeze()
    assert bool(during) is loaded
    assert during[:2] == ([False, True] if loaded else [])


def test_place_run_by_main_keeps_the_collector_paused_to_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``place`` builds everything once and ends: run by main, the collector stays paused
    from the start through the output (a pass would only walk live objects), and main
    turns it on again once it has frozen the heap."""
    from hetsched.cli import place as command

    cluster, jobs = tmp_path / "cluster.yaml", tmp_path / "jobs.yaml"
    cluster.write_text("nodes:\n- {name: n0, cpu: '4', memory: 8Gi}\n")
    jobs.write_text("jobs:\n- {name: j0, resources: {cpu: '1', memory: 1Gi}}\n")
    during: list[bool] = []
    place_jobs = command.place_jobs

    def spy(*args: Any) -> dict[str, Any]:
        during.append(gc.isenabled())
        return place_jobs(*args)

    monkeypatch.setattr(command, "place_jobs", spy)
    argv = ["place", "--cluster", str(cluster), "--jobs", str(jobs), "-o", "json"]
    monkeypatch.setattr(sys, "argv", ["hetsched", *argv])
    assert gc.isenabled()
    try:
        with pytest.raises(SystemExit) as exited:
            main()
        assert exited.value.code in (0, None)
        assert gc.isenabled()
    finally:
        gc.unfreeze()
    assert during == [False]
    assert '"node": "n0"' in capsys.readouterr().out
