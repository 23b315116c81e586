"""Small things a user reads: ``devices`` says it lists this machine only (help and
output), and its table through a pipe is plain columns with a header; ``why`` says what is
missing before what preemption cannot do."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from hetsched.cli.jobs import explanation_lines
from hetsched.cli.main import app


def test_devices_says_it_lists_this_machine_only(tmp_path: Path) -> None:
    help_text = " ".join(CliRunner().invoke(app, ["devices", "--help"]).stdout.split())
    assert "Devices of this machine only" in help_text
    assert "hetsched nodes" in help_text  # where a cluster's devices are
    fake = tmp_path / "fake.yaml"
    fake.write_text("devices:\n  - {class: npu, vendor: huawei, model: Ascend 910, count: 1}\n")
    result = CliRunner().invoke(app, ["devices", "-b", "fake", "--fake", str(fake)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "Devices of this machine (1)"
    assert lines[1].split() == ["class", "vendor", "model", "health", "found", "by", "attributes"]
    assert lines[2].split()[:5] == ["npu", "huawei", "Ascend", "910", "healthy"]


PREEMPTION = "preemption: no job may be preempted for it (priority, queue, ...)"


def test_why_says_what_is_missing_before_what_preemption_cannot_do() -> None:
    """``why``'s lines under the headline: the reasons and the rejections (what is
    missing), then the preemption line, then what would fit, as the dashboard orders them."""
    explanation = {
        "summary": "no node fits a task now (0 of 3 nodes)",
        "reasons": [
            PREEMPTION,
            "quota: team-a has 2 of 8 gpu left",
        ],
        "rejections": [
            {"reason": "no gpu", "nodes": 2},
            {"reason": "insufficient free gpu (want 3x gpu)", "nodes": 1},
        ],
        "suggestions": ["1 gpu instead of 3"],
    }
    assert explanation_lines(explanation) == [
        "  quota: team-a has 2 of 8 gpu left",
        "  - no gpu: 2 nodes",
        "  - insufficient free gpu (want 3x gpu): 1 node",
        f"  {PREEMPTION}",
        "  would fit now: 1 gpu instead of 3",
    ]
