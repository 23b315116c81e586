"""``hetsched devices`` on a fake sysfs tree and a fake device file."""

from __future__ import annotations

import json
from pathlib import Path

from sysfs import SysfsTree
from typer.testing import CliRunner

from hetsched.cli.main import app


def test_devices_as_json(tmp_path: Path) -> None:
    sysfs = SysfsTree(tmp_path / "sys")
    sysfs.numa_node(0, "0-3", 8 << 20)
    sysfs.pci("0000:5e:00.0", 0x10EE, 0x5005, 0x120000, numa=0)
    fake = tmp_path / "fake.yaml"
    fake.write_text("devices:\n  - {class: npu, vendor: huawei, model: Ascend 910, count: 1}\n")
    args = ["devices", "-b", "cpu,pci", "--sysfs-root", str(tmp_path / "sys"), "--fake", str(fake)]
    result = CliRunner().invoke(app, [*args, "-o", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["class"], r["vendor"], r["model"], r["source"]) for r in rows] == [
        ("cpu", rows[0]["vendor"], rows[0]["model"], "cpu"),
        ("fpga", "xilinx", "Alveo U250", "pci"),
        ("npu", "huawei", "Ascend 910", "fake"),
    ]
    assert rows[0]["attributes"] == {"numa": 0, "cores": 4, "memory_mib": 8192}


def test_an_unknown_backend_is_named() -> None:
    result = CliRunner().invoke(app, ["devices", "-b", "cpu,rocm"])
    assert result.exit_code == 1
    assert "unknown backend 'rocm' (known: cpu, fake, nvidia, pci)" in result.output
