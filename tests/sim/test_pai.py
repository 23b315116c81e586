"""The Alibaba PAI 2020 machine list as nodes: literal rows, their errors, and scaling."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.sim.alibaba import TraceError
from hetsched.sim.pai import load_machines

ROWS = [
    "m1,P100,64,512,2",
    "m2,P100,64,512,2",
    "m3,T4,96,512,2",
    "m4,V100M32,96,384,8",
    "m5,CPU,96,512,0",
]


def _file(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "pai_machine_spec.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_machines_become_nodes_with_their_gpus(tmp_path: Path) -> None:
    nodes = load_machines(_file(tmp_path, ROWS))
    assert [(n.name, n.cpu_milli, n.memory_mib, len(n.devices)) for n in nodes] == [
        ("m1", 64_000, 512 * 1024, 2),
        ("m2", 64_000, 512 * 1024, 2),
        ("m3", 96_000, 512 * 1024, 2),
        ("m4", 96_000, 384 * 1024, 8),
        ("m5", 96_000, 512 * 1024, 0),
    ]
    assert {d.model for d in nodes[3].devices} == {"V100M32"}
    assert {d.device_class for n in nodes for d in n.devices} == {"gpu"}


def test_gpu_only_leaves_cpu_machines_out(tmp_path: Path) -> None:
    nodes = load_machines(_file(tmp_path, ROWS), gpu_only=True)
    assert [n.name for n in nodes] == ["m1", "m2", "m3", "m4"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("m9,P100,64,512", "row"),
        (",P100,64,512,2", "machine"),
        ("m9,,64,512,2", "gpu_type"),
        ("m9,P100,x,512,2", "not an integer"),
        ("m9,P100,64,-1,2", "must be >= 0"),
        ("m9,CPU,96,512,2", "a CPU machine with 2 GPUs"),
        ("m1,P100,64,512,2", "duplicate machine"),
    ],
)
def test_a_bad_row_names_its_line_and_field(tmp_path: Path, row: str, message: str) -> None:
    path = _file(tmp_path, ["m1,P100,64,512,2", row])
    with pytest.raises(TraceError, match=message) as caught:
        load_machines(path)
    assert f"{path}:2:" in str(caught.value)


def test_a_missing_file_and_a_bad_scale_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_machines(tmp_path / "absent.csv")
    with pytest.raises(ValueError, match="scale"):
        load_machines(_file(tmp_path, ROWS), scale=0.0)


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=4),
    scale=st.floats(min_value=0.01, max_value=1.0),
)
def test_scaling_keeps_every_shape_in_proportion(
    tmp_path_factory: pytest.TempPathFactory, counts: list[int], scale: float
) -> None:
    shapes = ["P100,64,512,2", "T4,96,512,2", "V100,96,384,8", "CPU,96,512,0"]
    rows = [f"m{s}-{i},{shapes[s]}" for s, n in enumerate(counts) for i in range(n)]
    path = _file(tmp_path_factory.mktemp("pai"), rows)
    kept = load_machines(path, scale)
    for s, n in enumerate(counts):
        mine = [node for node in kept if node.name.startswith(f"m{s}-")]
        assert len(mine) == max(1, round(n * scale))
        # the first machines of the shape, in file order
        assert [node.name for node in mine] == [f"m{s}-{i}" for i in range(len(mine))]
