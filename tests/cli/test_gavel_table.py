"""``sim gavel``'s table reads as values, never as Python reprs, at 80 columns and through a
pipe."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from typer.testing import CliRunner

from hetsched.cli import sim_gavel
from hetsched.cli.main import app
from hetsched.cli.sim_gavel import cell


def test_cells() -> None:
    assert cell("cluster", {"v100": 36, "p100": 36, "k80": 36}) == "v100 36, p100 36, k80 36"
    assert cell("window", [4000, 5000]) == "4000:5000"
    assert cell("mean_jct_h", None) == "-"
    assert cell("complete", False) == "no" and cell("central", True) == "yes"
    assert cell("utilization_by_model", {"v100": 0.51234}) == "v100 0.512"
    assert cell("round_s", 360.0) == "360"


@pytest.mark.parametrize("width", [80, None], ids=["terminal-80", "pipe"])
def test_the_table_has_no_reprs(monkeypatch: pytest.MonkeyPatch, width: int | None) -> None:
    buffer = io.StringIO()
    if width is not None:
        terminal = Console(file=buffer, width=width, force_terminal=True, color_system=None)
        monkeypatch.setattr(sim_gavel, "console", terminal)
    args = ["sim", "gavel", "--rate", "2", "--until", "10", "--window", "0:20"]
    result = CliRunner().invoke(app, args, terminal_width=80)
    assert result.exit_code == 0, result.output
    text = buffer.getvalue() + result.stdout
    assert "v100 36, p100 36, k80 36" in text and "0:20" in text
    for mark in ("{", "}", "[", "'", "None", "False", "True"):
        assert mark not in text, text
    assert max(len(line) for line in text.splitlines()) <= 80
