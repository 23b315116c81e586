"""Long commands show progress on standard error (a bar on a terminal, nothing in JSON
mode or through a pipe), and ``sim openb --bound`` prints the run's table before the bound
starts (it takes a minute on the real trace)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from builders import openb_mini_trace
from hetsched.cli import output, sim_openb
from hetsched.cli.main import app
from hetsched.sim.experiments.openb_limit import limit_steps


def _args(folder: Path, *extra: str) -> list[str]:
    return ["sim", "openb", "--trace-dir", str(folder), "--trace", "mini", "--bound", *extra]


def _consoles(
    monkeypatch: pytest.MonkeyPatch, err_terminal: bool
) -> tuple[io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    stdout = Console(file=out, width=80, color_system=None)
    stderr = Console(file=err, width=80, force_terminal=err_terminal, color_system=None)
    monkeypatch.setattr(sim_openb, "console", stdout)
    monkeypatch.setattr(output, "console", stdout, raising=False)
    monkeypatch.setattr(output, "err_console", stderr, raising=False)
    return out, err


def test_the_runs_table_comes_before_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, err = _consoles(monkeypatch, err_terminal=True)
    real = sim_openb.run_limit
    seen: dict[str, Any] = {"steps": 0}

    def run_limit(*args: Any, **kwargs: Any) -> Any:
        seen["printed"] = out.getvalue()  # what the user sees when the bound starts

        def step(text: str) -> None:
            seen["steps"] += 1
            kwargs_step(text)

        kwargs_step = kwargs.pop("step")
        return real(*args, step=step, **kwargs)

    monkeypatch.setattr(sim_openb, "run_limit", run_limit)
    result = CliRunner().invoke(app, _args(openb_mini_trace(tmp_path)))
    assert result.exit_code == 0, result.output
    assert "openb mini, fgd, seed 42" in seen["printed"] and "pods arrived" in seen["printed"]
    assert "the limit" not in seen["printed"]
    assert "the limit: unallocated GPU %" in out.getvalue()
    assert seen["steps"] == limit_steps()
    # the progress went to standard error, a terminal here
    assert "the limit (an LP per point)" in err.getvalue()


@pytest.mark.parametrize("json_mode", [True, False], ids=["json", "pipe"])
def test_no_progress_in_json_mode_or_through_a_pipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, json_mode: bool
) -> None:
    out, err = _consoles(monkeypatch, err_terminal=json_mode)  # json: even on a terminal
    extra = ("-o", "json") if json_mode else ()
    result = CliRunner().invoke(app, _args(openb_mini_trace(tmp_path), *extra))
    assert result.exit_code == 0, result.output
    assert err.getvalue() == ""
    if json_mode:
        doc = json.loads(result.stdout)
        assert doc["bound"]["lower_bound_unallocated_gpu_pct"]["100"] >= 0
        assert out.getvalue() == ""


def test_the_rounds_table_never_cuts_a_policy(tmp_path: Path) -> None:
    """``sim replay --rounds`` prints its table as plain columns through a pipe, each
    policy's name whole, with no progress on standard output."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "nodes:\n  - name: k\n    cpu: '64'\n    memory: 256Gi\n"
        "    devices: [{class: gpu, vendor: nvidia, model: K80, count: 4}]\n"
        "  - name: v\n    cpu: '64'\n    memory: 256Gi\n"
        "    devices: [{class: gpu, vendor: nvidia, model: V100, count: 4}]\n"
    )
    workload = tmp_path / "jobs.csv"
    rows = [
        "id,submit_time,duration,user,queue,priority,cpu,memory,device_class,count,share,selector,gang"
    ]
    rows += [f"j{i},{i * 60},{600 + 60 * i},u{i % 3},q,0,1,1Gi,gpu,1,,,1" for i in range(12)]
    workload.write_text("\n".join(rows) + "\n")
    args = ["sim", "replay", "--cluster", str(cluster), "--workload", str(workload)]
    result = CliRunner().invoke(
        app, [*args, "--rounds", "agnostic-las,fair-srtf", "--alphas", "0,1"]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("policy"))
    assert lines[header].split()[:3] == ["policy", "alpha", "done"]
    policies = [line.split()[0] for line in lines[header + 1 :] if line.strip()]
    assert policies == ["agnostic-las", "fair-srtf", "fair-srtf"], result.stdout
    assert "…" not in result.stdout


def test_the_topology_table_never_cuts_a_way_or_a_level() -> None:
    """``sim topology`` through a pipe: plain columns, every way and level name whole (a
    rich table at rich's 80 columns cut them to ``prefer…`` and ``nvlink…``)."""
    args = ["sim", "topology", "--jobs", "20", "--blocks", "1", "--racks", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "20 jobs, load 0.85, seed 0"
    assert lines[1].split()[:3] == ["way", "finished", "JCT"]
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == ["unaware", "required", "preferred"]
    assert all(r[1] == "20/20" for r in rows)
    levels = {word for r in rows for word in r[7:] if word.isalpha() or "-" in word}
    assert levels and levels <= {"across", "block", "rack", "nvlink-domain"}, levels
    assert "…" not in result.stdout


@pytest.mark.parametrize("err_terminal", [True, False], ids=["terminal", "pipe"])
def test_sim_topology_shows_its_progress_on_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch, err_terminal: bool
) -> None:
    """One step per way (unaware, required, preferred) on standard error when it is a
    terminal; nothing through a pipe, and stdout is the table alone either way."""
    out, err = _consoles(monkeypatch, err_terminal)
    args = ["sim", "topology", "--jobs", "12", "--blocks", "1", "--racks", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    if err_terminal:
        assert "sim topology, 12 jobs" in err.getvalue() and "3/3" in err.getvalue()
    else:
        assert err.getvalue() == ""
    assert "sim topology," not in out.getvalue() + result.stdout
