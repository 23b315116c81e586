import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetsched.cli.main import app

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_place_json_shape(examples: Path) -> None:
    code, out = invoke(
        "place",
        "--cluster",
        str(examples / "clusters" / "mixed.yaml"),
        "--jobs",
        str(examples / "jobs" / "mixed.yaml"),
        "-o",
        "json",
    )
    assert code == 0, out
    doc = json.loads(out)
    assert set(doc) == {"placements", "pending", "stranded", "ignored"}
    assert doc["ignored"] == []
    first = doc["placements"][0]
    assert set(first) == {"job", "task", "node", "cpu_milli", "memory_mib", "devices"}
    assert first["job"] == "train-llm" and first["task"] == 0
    assert all(d["share"] == 1000 for d in first["devices"]) and len(first["devices"]) == 8
    shares = [d["share"] for p in doc["placements"] if p["job"] == "notebook" for d in p["devices"]]
    assert shares == [300]
    fpga = [p for p in doc["placements"] if p["job"] == "bitstream-compile"]
    assert fpga[0]["node"] == "fpga-0"
    assert [p["job"] for p in doc["pending"]] == ["huge-model"]
    assert any("even when empty" in r for r in doc["pending"][0]["reasons"])
    # no device is given out beyond its capacity
    used: dict[str, int] = {}
    for p in doc["placements"]:
        for d in p["devices"]:
            used[d["id"]] = used.get(d["id"], 0) + d["share"]
    assert max(used.values()) <= 1000


def test_place_example_keeps_cpu_work_off_accelerators(examples: Path, tmp_path: Path) -> None:
    """The default profile puts the four CPU-only ETL tasks on the CPU-only nodes and leaves
    no accelerator without the CPU and memory to feed it; best-fit alone did neither."""
    cluster, jobs = str(examples / "clusters" / "mixed.yaml"), str(examples / "jobs" / "mixed.yaml")
    code, out = invoke("place", "--cluster", cluster, "--jobs", jobs, "-o", "json")
    assert code == 0, out
    doc = json.loads(out)
    etl = [p["node"] for p in doc["placements"] if p["job"] == "etl"]
    assert len(etl) == 4 and all(node.startswith("cpu-") for node in etl)
    assert doc["stranded"]["stranded"] == 0 and doc["stranded"]["accelerators"] == 30
    assert doc["stranded"]["by_node"] == {}
    bestfit_only = tmp_path / "bestfit.yaml"
    bestfit_only.write_text("score: [bestfit]\n")
    code, out = invoke(
        "place", "--cluster", cluster, "--jobs", jobs, "--profile", str(bestfit_only), "-o", "json"
    )
    before = json.loads(out)
    assert any(not p["node"].startswith("cpu-") for p in before["placements"] if p["job"] == "etl")
    assert before["stranded"]["stranded"] >= 1


def test_place_table(examples: Path) -> None:
    code, out = invoke(
        "place",
        "--cluster",
        str(examples / "clusters" / "mixed.yaml"),
        "--jobs",
        str(examples / "jobs" / "mixed.yaml"),
    )
    assert code == 0
    assert "train-llm" in out and "gpu0-7" in out and "Pending (1 job)" in out
    assert "stranded accelerators: 0 of 30 (0.0%)" in out


def test_place_with_bad_profile_exits_2(examples: Path, tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("score: [nope]\n")
    code, out = invoke(
        "place",
        "--cluster",
        str(examples / "clusters" / "mixed.yaml"),
        "--jobs",
        str(examples / "jobs" / "mixed.yaml"),
        "--profile",
        str(profile),
    )
    assert code == 2 and "unknown plugin 'nope'" in out


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("clusters/mixed.yaml", "cluster"),
        ("jobs/mixed.yaml", "jobs"),
        ("profiles/default.yaml", "profile"),
    ],
)
def test_check_valid_files(examples: Path, name: str, kind: str) -> None:
    code, out = invoke("check", str(examples / name), "-o", "json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["valid"] is True and doc["kind"] == kind and doc["normalized"]


def test_check_reports_every_error_with_its_path(tmp_path: Path) -> None:
    bad = tmp_path / "jobs.yaml"
    bad.write_text(
        "jobs:\n"
        "  - name: ok\n"
        "  - name: bad\n"
        "    resources:\n"
        "      cpu: lots\n"
        "      devices: [{class: gpu, share: 1500}]\n"
    )
    code, out = invoke("check", str(bad), "-o", "json")
    assert code == 2
    errors = json.loads(out)["errors"]
    assert "jobs[1].resources.devices[0].share: must be 1..1000, got 1500" in errors
    assert any(e.startswith("jobs[1].resources.cpu: not a quantity") for e in errors)
    code, out = invoke("check", str(bad))
    assert code == 2 and "share: must be 1..1000, got 1500" in out


def test_check_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    code, out = invoke("check", str(tmp_path / "missing.yaml"))
    assert code == 2 and "cannot read" in out
    broken = tmp_path / "broken.yaml"
    broken.write_text("jobs: [\n")
    code, out = invoke("check", str(broken))
    assert code == 2 and "not valid YAML" in out


def test_help_explains() -> None:
    code, out = invoke("place", "--help")
    assert code == 0
    assert "reasons" in out and "--cluster" in out
