"""The neutral workload CSV: defaults, round trips, and errors with file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import EXAMPLES, gpu_node
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.model.specs import load_cluster
from hetsched.sim.workload import (
    COLUMNS,
    Workload,
    WorkloadError,
    WorkloadJob,
    read_workload,
    write_workload,
)
from hetsched.sim.workload_check import check_against_cluster, selector_models

HEADER = ",".join(COLUMNS)


def write(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "w.csv"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def errors_of(path: Path) -> list[str]:
    with pytest.raises(WorkloadError) as info:
        read_workload(path)
    return info.value.errors


def test_defaults_for_empty_cells(tmp_path: Path) -> None:
    path = write(tmp_path, "10,2h,,,,,,,,,,", "0,90,alice,prod,3,500m,16Gi,gpu,2,,,4")
    workload = read_workload(path)
    first, second = workload.jobs  # sorted by submit time
    assert first.job.id == "job-3" and first.line == 3
    assert first.job.resources == TaskRequest(500, 16384, (DeviceRequest.of("gpu", 2),))
    assert (first.job.user, first.job.queue, first.job.priority) == ("alice", "prod", 3)
    assert first.job.replicas == 4 and first.duration_s == 90.0
    assert second.job.id == "job-2" and second.duration_s == 7200.0
    assert (second.job.user, second.job.queue, second.job.priority) == ("default", "default", 0)
    assert second.job.resources == TaskRequest()
    assert second.job.replicas == 1


def test_header_accepts_spaces_and_the_optional_columns(tmp_path: Path) -> None:
    header = "id," + HEADER.replace("device_class", "Device Class") + ",estimate"
    path = write(tmp_path, "a,0,1,,,,,,gpu,,500,,,2h", header=header)
    (item,) = read_workload(path).jobs
    assert item.job.id == "a" and item.job.estimated_runtime_s == 7200
    assert item.job.resources.devices[0].primary.share == 500


@pytest.mark.parametrize(
    ("rows", "header", "expected"),
    [
        ((), HEADER.replace(",duration", ""), "w.csv:1: header: missing column 'duration'"),
        ((), HEADER + ",colour", "w.csv:1: header: unknown column 'colour'"),
        (("0,10,,,,-2,,,,,,",), HEADER, "w.csv:2: cpu: must not be negative"),
        (("0,-10,,,,,,,,,,",), HEADER, "w.csv:2: duration: must not be negative"),
        (("-1,10,,,,,,,,,,",), HEADER, "w.csv:2: submit_time: Input should be greater"),
        ((",10,,,,,,,,,,",), HEADER, "w.csv:2: submit_time: Field required"),
        (("0,10,,,,,-1Gi,,,,,",), HEADER, "w.csv:2: memory: must not be negative"),
        (("0,10,,,,2x,,,,,,",), HEADER, "w.csv:2: cpu: unknown suffix"),
        (("0,10,,,,,,gpu,0,,,",), HEADER, "w.csv:2: count: Input should be greater"),
        (("0,10,,,,,,gpu,1,1500,,",), HEADER, "w.csv:2: share: Input should be less"),
        (("0,10,,,,,,gpu,2,500,,",), HEADER, "w.csv:2: share: a share below 1000 needs"),
        (("0,10,,,,,,,2,,,",), HEADER, "w.csv:2: count: a device count needs a device class"),
        (("0,10,,,,,,gpu,1,,device.attributes[,",), HEADER, "w.csv:2: selector: invalid"),
        (("0,10,,,,,,,,,,0",), HEADER, "w.csv:2: gang: Input should be greater"),
        (("0,10,,,x,,,,,,,",), HEADER, "w.csv:2: priority: Input should be a valid integer"),
        (("0,10,,,",), HEADER, "w.csv:2: row: expected 12 fields, got 5"),
        (("0,soon,,,,,,,,,,",), HEADER, "w.csv:2: duration: not a duration"),
    ],
)
def test_bad_rows_name_file_line_and_field(
    tmp_path: Path, rows: tuple[str, ...], header: str, expected: str
) -> None:
    errors = errors_of(write(tmp_path, *rows, header=header))
    assert any(expected in e for e in errors), errors
    assert all(e.startswith(str(tmp_path / "w.csv")) for e in errors)


def test_every_bad_row_is_listed_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "0,10,,,,,,,,,,", "0,-1,,,,,,,,,,", "", "0,10,,,,-1,,,,,,")
    errors = errors_of(path)
    assert [e.split(": ")[0].rsplit(":", 1)[1] for e in errors] == ["3", "5"]


def test_duplicate_ids(tmp_path: Path) -> None:
    header = "id," + HEADER
    errors = errors_of(write(tmp_path, "a,0,1,,,,,,,,,,", "a,0,1,,,,,,,,,,", header=header))
    assert errors == [f"{tmp_path / 'w.csv'}:3: id: duplicate job id 'a' (first on line 2)"]


def test_missing_file_and_empty_file(tmp_path: Path) -> None:
    assert "cannot read" in errors_of(tmp_path / "nope.csv")[0]
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    assert errors_of(empty) == [f"{empty}:1: header: the file is empty"]


@pytest.mark.parametrize(
    ("selector", "models"),
    [
        ('device.attributes["model"] in ["A100", "H100"]', ["A100", "H100"]),
        ("device.attributes['model'] == 'V100'", ["V100"]),
        ('device.attributes["memory_gib"] >= 40', []),
        ('device.attributes["model"] in ["A"] || device.attributes["model"] == "B"', ["A", "B"]),
    ],
)
def test_selector_models(selector: str, models: list[str]) -> None:
    assert selector_models(selector) == models


def test_unknown_gpu_model_against_the_cluster(tmp_path: Path) -> None:
    z100 = '"device.attributes[""model""] in [""Z100""]"'
    v100 = '"device.attributes[""model""] in [""V100""]"'
    path = write(
        tmp_path,
        f"0,10,,,,,,gpu,1,,{v100},",
        f"0,10,,,,,,gpu,1,,{z100},",
        "0,10,,,,,,fpga,1,,,",
        '0,10,,,,,,gpu,1,,"device.attributes[""memory_gib""] > 500",',
    )
    nodes = load_cluster(EXAMPLES / "clusters" / "mixed.yaml")
    problems = check_against_cluster(read_workload(path), nodes)
    assert problems[0] == (
        f"{path}:3: selector: unknown gpu model 'Z100' (the cluster has: A100, T4, V100)"
    )
    assert problems[1].startswith(f"{path}:5: selector: matches no gpu device")
    assert len(problems) == 2  # fpga exists in mixed.yaml
    only_gpus = check_against_cluster(read_workload(path), [gpu_node("n", 1, "V100")])
    assert f"{path}:4: device_class: the cluster has no 'fpga' devices (it has: gpu)" in only_gpus


_names = st.text("abcxyz-_", min_size=1, max_size=6)


@st.composite
def workload_jobs(draw: st.DrawFn) -> list[WorkloadJob]:
    count = draw(st.integers(0, 6))
    out = []
    for i in range(count):
        gpus = draw(st.integers(0, 4))
        share = draw(st.sampled_from([1000, 500, 250])) if gpus == 1 else 1000
        model = draw(st.sampled_from([None, "A100", "V100"]))
        selector = f'device.attributes["model"] in ["{model}"]' if model and gpus else None
        devices = (DeviceRequest.of("gpu", gpus, share, selector),) if gpus else ()
        job = Job(
            id=f"j{i}",
            resources=TaskRequest(
                draw(st.integers(0, 64)) * 250, draw(st.integers(0, 1024)) * 64, devices
            ),
            user=draw(_names),
            queue=draw(_names),
            priority=draw(st.integers(-5, 5)),
            replicas=draw(st.integers(1, 4)),
            submit_time=float(i * draw(st.integers(0, 100))),
            estimated_runtime_s=draw(st.one_of(st.none(), st.integers(0, 10**6).map(float))),
        )
        duration = draw(st.floats(0, 1e6, allow_nan=False, allow_infinity=False))
        out.append(WorkloadJob(job, duration))
    return sorted(out, key=lambda j: j.job.submit_time)


@settings(max_examples=40, deadline=None)
@given(jobs=workload_jobs())
def test_write_then_read_is_the_same_workload(jobs: list[WorkloadJob]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "w.csv"
        assert write_workload(path, Workload(tuple(jobs))) == len(jobs)
        back = read_workload(path)
    assert [(j.job, j.duration_s) for j in back.jobs] == [(j.job, j.duration_s) for j in jobs]


def test_speed_columns_read_and_round_trip(tmp_path: Path) -> None:
    text = (
        "id,submit_time,duration,user,queue,priority,cpu,memory,device_class,count,share,"
        "selector,gang,speed,work,job_type\n"
        "a,0,,u,q,0,4,16Gi,gpu,1,,,1,A100:3.1;V100:1;T4:0.35,2h@V100,\n"
        "b,5,600,u,q,0,4,16Gi,gpu,1,,,1,,1e6,ResNet-50 (batch size 64)\n"
        "c,9,60,u,q,0,4,16Gi,gpu,1,,,1,,,\n"
    )
    path = tmp_path / "speeds.csv"
    path.write_text(text)
    workload = read_workload(path)
    a, b, c = workload.jobs
    assert a.duration_s == 7200  # work as a duration on a model sets the duration
    assert dict(a.job.speed.rates) == {"A100": 3.1, "V100": 1.0, "T4": 0.35}
    assert (a.job.speed.work_s, a.job.speed.work_model) == (7200, "V100")
    assert (b.job.speed.job_type, b.job.speed.work) == ("ResNet-50 (batch size 64)", 1e6)
    assert not c.job.speed.known
    out = tmp_path / "out.csv"
    write_workload(out, workload)
    again = read_workload(out)
    assert [j.job.speed for j in again.jobs] == [j.job.speed for j in workload.jobs]
    assert [j.duration_s for j in again.jobs] == [7200, 600, 60]


@pytest.mark.parametrize(
    ("cells", "error"),
    [
        (",,,", "duration: required (or give work as a duration: 2h@V100)"),
        ("60,A100:-1,,", "speed: A100: rate must be finite and >= 0"),
        ("60,A100,,", "speed: speed entry 'A100': expected MODEL:RATE"),
        ("60,,1e6,", "work: work in steps needs a speed map or a job type"),
        ("60,A100:2,2h@T4,", "work: work is a duration on T4, which the speed map does not"),
        ("60,,soon,", "work: work 'soon': expected steps (1.2e6)"),
    ],
)
def test_speed_column_errors(tmp_path: Path, cells: str, error: str) -> None:
    header = "submit_time,user,queue,priority,cpu,memory,device_class,count,share,selector,gang"
    path = tmp_path / "bad.csv"
    path.write_text(f"{header},duration,speed,work,job_type\n0,u,q,0,1,1Gi,gpu,1,,,1,{cells}\n")
    with pytest.raises(WorkloadError) as info:
        read_workload(path)
    assert any(e.startswith(f"{path}:2: {error}") for e in info.value.errors), info.value.errors
