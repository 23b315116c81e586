from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from hetsched.agent.discovery import discover_local
from hetsched.model.specs import SpecError


def test_this_machine_is_a_node() -> None:
    node = discover_local("here")
    assert node.name == "here"
    assert node.cpu_milli == (psutil.cpu_count(logical=True) or 1) * 1000
    assert node.memory_mib == psutil.virtual_memory().total // (1 << 20)
    assert node.devices == ()


def test_fake_devices_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "fake.yaml"
    path.write_text(
        "devices:\n"
        "  - {class: gpu, vendor: nvidia, model: T4, count: 2}\n"
        "  - {class: fpga, vendor: xilinx, model: U250}\n"
    )
    node = discover_local("box", path)
    assert [d.id for d in node.devices] == ["box/gpu0", "box/gpu1", "box/fpga0"]
    assert node.devices[0].model == "T4"


def test_a_bad_fake_file_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "fake.yaml"
    path.write_text("devices:\n  - {class: gpu, count: -1}\n")
    with pytest.raises(SpecError, match=r"devices\[0\]\.count"):
        discover_local("box", path)
