"""``hetsched sim replay`` and ``sim synth`` end to end, and the metrics they report."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from builders import EXAMPLES, TRACES, gpu_node, job
from hetsched.cli.main import app
from hetsched.model.specs import load_cluster
from hetsched.sim.engine import EngineConfig, Simulator
from hetsched.sim.metrics import finish_time_fairness, jain_index, percentiles, summarize
from hetsched.sim.replay import available_policies, policy_from_name
from hetsched.sim.replay import replay as run_replay
from hetsched.sim.replay_report import report_document
from hetsched.sim.workload import COLUMNS, Workload, WorkloadJob, read_workload

runner = CliRunner()
CLUSTER = str(EXAMPLES / "clusters" / "mixed.yaml")
SMALL = str(EXAMPLES / "workloads" / "synthetic-small.csv")
GAVEL_VC = TRACES / "gavel" / "msr_seed0" / "6c71a0.trace"


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_replay_json_compares_every_registered_policy() -> None:
    code, out = invoke(
        "sim", "replay", "--cluster", CLUSTER, "--workload", SMALL, "--policies", "all",
        "-o", "json", "--limit", "120",
    )  # fmt: skip
    assert code == 0, out
    doc = json.loads(out)
    assert doc["policies"] == available_policies() and "fifo" in doc["policies"]
    assert doc["jobs"] == 120 and doc["nodes"] == 10
    for entry in doc["replays"]:
        summary = entry["summary"]
        assert set(summary) >= {"wait_s", "jct_s", "makespan_s", "utilization", "fairness"}
        assert set(summary["wait_s"]) == {"count", "mean", "p50", "p99", "max"}
        assert set(summary["utilization"]) == {"cpu", "A100", "V100", "T4", "U250"}
        assert 0 < summary["fairness"]["jain_users"] <= 1
        assert len(entry["jobs"]) == 120
        first = entry["jobs"][0]
        assert first["wait_s"] == first["start"] - first["submit"]
        assert entry["series"]["time"] and set(entry["series"]["utilization"]) == set(
            summary["utilization"]
        )


def test_replay_json_streams_the_text_of_the_whole_document() -> None:
    # -o json writes the per-job rows as they are built; the text is byte for byte the
    # whole document's json.dumps, as it was printed before it was streamed
    code, out = invoke(
        "sim", "replay", "--cluster", CLUSTER, "--workload", SMALL, "--policies", "fifo,drf",
        "-o", "json", "--limit", "150", "--seed", "2",
    )  # fmt: skip
    assert code == 0, out
    nodes = load_cluster(CLUSTER)
    workload = read_workload(SMALL)
    workload = Workload(workload.jobs[:150], workload.source)
    results = [
        run_replay(nodes, workload, policy_from_name(name), 2, EngineConfig(tick_s=60.0))
        for name in ("fifo", "drf")
    ]
    meta = {
        "workload": SMALL,
        "jobs": 150,
        "cluster": CLUSTER,
        "nodes": len(nodes),
        "seed": 2,
        "tick_s": 60.0,
        "policies": ["fifo", "drf"],
    }
    document = report_document(results, meta, jobs=True)
    assert len(document["replays"][1]["jobs"]) == 150
    assert out == json.dumps(document, indent=2) + "\n"


def test_replay_is_deterministic_for_a_seed() -> None:
    args = ("sim", "replay", "--cluster", CLUSTER, "--workload", SMALL, "-o", "json",
            "--limit", "80", "--seed", "3")  # fmt: skip
    assert invoke(*args) == invoke(*args)


def test_replay_report_folder(tmp_path: Path) -> None:
    out = tmp_path / "report"
    code, text = invoke(
        "sim", "replay", "--cluster", CLUSTER, "--workload", SMALL, "--limit", "60",
        "--policies", "fifo", "--compare-profiles", str(EXAMPLES / "profiles" / "default.yaml"),
        "--out", str(out),
    )  # fmt: skip
    assert code == 0, text
    assert "wait p99" in text and "Jain (users)" in text
    names = {p.name for p in out.iterdir()}
    assert names == {
        "report.md", "summary.json", "jobs.csv", "utilization.png", "queue_length.png",
        "wait_by_queue.png",
    }  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert [r["policy"] for r in summary["replays"]] == ["fifo", "default"]
    with open(out / "jobs.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 120 and rows[0]["policy"] == "fifo"
    assert (out / "utilization.png").read_bytes()[:4] == b"\x89PNG"
    assert "| wait p99 |" in (out / "report.md").read_text()


@pytest.mark.skipif(not GAVEL_VC.is_file(), reason="Gavel traces not present (../shared/traces)")
def test_replay_a_gavel_trace_on_the_gavel_cluster() -> None:
    code, out = invoke(
        "sim", "replay", "--cluster", str(EXAMPLES / "clusters" / "gavel.yaml"),
        "--workload", f"{GAVEL_VC},{GAVEL_VC.parent / '23dbec.trace'}", "--limit", "150",
        "-o", "json", "--no-jobs",
    )  # fmt: skip
    assert code == 0, out
    (entry,) = json.loads(out)["replays"]
    assert "jobs" not in entry
    summary = entry["summary"]
    assert summary["jobs"] == 150 and summary["states"] == {"succeeded": 150}
    assert set(summary["utilization"]) == {"cpu", "V100", "P100", "K80"}
    assert set(summary["fairness"]["user_share"]) == {"6c71a0", "23dbec"}


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ('0,10,,,,,,gpu,1,,"device.attributes[""model""] in [""Z100""]",', "selector"),
        ("0,10,,,,-4,,gpu,1,,,", "cpu"),
        ("0,10,,,,,,npu,1,,,", "device_class"),
    ],
)
def test_a_bad_trace_names_file_line_and_field(tmp_path: Path, row: str, field: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(",".join(COLUMNS) + "\n0,5,,,,,,,,,,\n" + row + "\n", encoding="utf-8")
    code, out = invoke("sim", "replay", "--cluster", CLUSTER, "--workload", str(path))
    assert code == 2
    assert f"{path}:3: {field}:" in out.replace("\n", "")


def test_a_missing_column_is_reported_on_the_header(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("submit_time,duration\n0,5\n", encoding="utf-8")
    code, out = invoke("sim", "replay", "--cluster", CLUSTER, "--workload", str(path))
    assert code == 2 and f"{path}:1: header: missing column 'user'" in out.replace("\n", "")


def test_an_unknown_policy_lists_the_available_ones() -> None:
    code, out = invoke(
        "sim", "replay", "--cluster", CLUSTER, "--workload", SMALL, "--policies", "lottery"
    )
    assert code == 2 and "unknown policy 'lottery'" in out and "fifo" in out


def test_synth_writes_a_workload_that_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    code, out = invoke(
        "sim", "synth", "--out", str(path), "--jobs", "40", "--load", "0.5", "--cluster",
        CLUSTER, "--model-mix", "any:1,V100:1", "--gpu-mix", "1:1,8:1", "--seed", "2",
    )  # fmt: skip
    assert code == 0, out
    workload = read_workload(path)
    assert len(workload) == 40
    # 8 V100 GPUs do not fit a 4-GPU V100 node: such jobs become gangs of 2 x 4
    pinned = [j.job for j in workload.jobs if j.job.resources.devices[0].primary.selector]
    assert {(j.replicas, j.resources.devices[0].primary.count) for j in pinned} <= {
        (1, 1),
        (2, 4),
    }
    code, out = invoke(
        "sim", "synth", "--out", str(path), "--cluster", CLUSTER, "--model-mix", "Z100:1"
    )
    assert code == 2 and "unknown gpu model 'Z100'" in out


# -- metric definitions on literal cases --------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [([1, 1, 1], 1.0), ([1, 0, 0, 0], 0.25), ([], 1.0), ([0, 0], 1.0), ([2, 1], 0.9)],
)
def test_jain_index(values: list[float], expected: float) -> None:
    assert jain_index(values) == pytest.approx(expected)


def test_percentiles_of_nothing_and_something() -> None:
    assert percentiles([])["count"] == 0
    stats = percentiles([1.0, 2.0, 3.0])
    assert (stats["mean"], stats["p50"], stats["max"]) == (2.0, 2.0, 3.0)


def test_summary_of_two_users_sharing_one_gpu() -> None:
    load = Workload(
        (
            WorkloadJob(job("a", cpu=0, memory=0, gpus=1, user="u1", submit_time=0.0), 100),
            WorkloadJob(job("b", cpu=0, memory=0, gpus=1, user="u2", submit_time=0.0), 100),
        )
    )
    result = Simulator([gpu_node("n", gpus=1)], load).run()
    summary = summarize(result)
    assert summary.wait == {"count": 2, "mean": 50.0, "p50": 50.0, "p99": 99.0, "max": 100.0}
    assert summary.makespan_s == 200 and summary.utilization["A100"] == 1.0
    # u1 held the GPU for 100 s of its 100 s; u2 for 100 of its 200 s
    assert summary.user_share == {"u1": 1.0, "u2": 0.5}
    assert summary.jain_users == pytest.approx(1.5**2 / (2 * 1.25))
    # both arrived with 2 users in the system: alone on half the cluster a 1-GPU job
    # (demand share 1) runs at half speed, so T_alone = 200 s
    assert finish_time_fairness(result.jobs) == {"u1": 0.5, "u2": 1.0}


def test_a_bad_profile_names_its_file(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("queue_sort: nope\n", encoding="utf-8")
    code, out = invoke(
        "sim", "replay", "--cluster", CLUSTER, "--workload", SMALL, "--profile", str(path)
    )
    assert code == 2 and f"{path}: queue_sort.name: unknown plugin 'nope'" in out.replace("\n", "")
