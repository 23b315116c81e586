"""The ``hetsched`` command imports a command's module only when that command runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetsched.cli.main import app

#: modules that ``hetsched place`` must not import: the service, the simulator, the
#: drivers for Kubernetes and Ray, the LP solver (each costs start-up time)
NOT_FOR_PLACE = [
    "hetsched.service",
    "hetsched.controlplane",
    "hetsched.sim",
    "hetsched.k8s",
    "hetsched.ray",
    "hetsched.federation",
    "scipy",
    "hetsched.cli.sim_replay",
    "hetsched.cli.up",
    "httpx",
    "fastapi",
    "sqlalchemy",
]

_PROBE = """
import json, sys
from hetsched.cli.main import main
sys.argv = ["hetsched", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _imported(*args: str) -> tuple[str, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=120
    )
    modules = set(json.loads(done.stderr.strip().splitlines()[-1]))
    return done.stdout, modules


def test_place_imports_only_what_it_needs(examples: Path) -> None:
    out, modules = _imported(
        "place",
        "--cluster",
        str(examples / "clusters" / "mixed.yaml"),
        "--jobs",
        str(examples / "jobs" / "mixed.yaml"),
        "-o",
        "json",
    )
    assert json.loads(out)["placements"], out
    loaded = [m for m in NOT_FOR_PLACE if m in modules]
    assert loaded == [], f"hetsched place imported {loaded}"


def test_help_lists_every_command_in_order() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    names = [
        "place", "check", "up", "submit", "jobs", "job", "logs", "cancel", "why",
        "checkpoint", "progress", "nodes", "queues", "devices", "version", "token", "k8s", "ray",
        "federation", "sim",
    ]  # fmt: skip
    listed = [
        line.strip("│ ").split()[0]
        for line in result.output.splitlines()
        if line.startswith("│ ") and line[2:3].isalpha()
    ]
    assert [n for n in listed if n in names] == names


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["version"], "0."),
        (["sim", "--help"], "replay"),
        (["sim", "replay", "--help"], "--policies"),
        (["token", "--help"], "create"),
        (["k8s", "--help"], "device-plugin"),
    ],
)
def test_commands_and_groups_load(args: list[str], expected: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert expected in result.output


def test_unknown_command_still_suggests() -> None:
    result = CliRunner().invoke(app, ["plac"])
    assert result.exit_code != 0
    assert "place" in result.output


_THREADS = """
import json, os
from hetsched.cli.main import _COMMANDS, load_command
load_command("place", *_COMMANDS["place"])
import numpy  # already imported by the command: its BLAS threads exist now
print(json.dumps([len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS")]))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
@pytest.mark.parametrize(("chosen", "expected"), [(None, [1, None]), ("2", [None, "2"])])
def test_place_starts_no_blas_threads_unless_asked(
    chosen: str | None, expected: list[object]
) -> None:
    """``place`` imports numpy with one BLAS thread (OpenBLAS starts one per core, unused),
    leaves the environment as it was for anything started later, and a user's own
    OPENBLAS_NUM_THREADS wins."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if chosen is not None:
        env["OPENBLAS_NUM_THREADS"] = chosen
    done = subprocess.run(
        [sys.executable, "-c", _THREADS], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    threads, left = json.loads(done.stdout)
    # with a number chosen, OpenBLAS may still start fewer threads (at most one per core)
    assert [threads if expected[0] is not None else None, left] == expected


_CLUSTER = """nodes:
- name: n
  cpu: '8'
  memory: 8Gi
  devices:
  - {class: gpu, model: A100, count: 2}
"""


@pytest.mark.parametrize(
    ("device", "selectors"),
    [
        ("{class: gpu}", False),
        ("{class: gpu, model: A100}", True),
        ('{class: gpu, selector: \'device.attributes["model"] == "A100"\'}', True),
    ],
    ids=["no-selector", "model-shorthand", "selector"],
)
def test_place_imports_the_selector_language_only_for_selectors(
    tmp_path: Path, device: str, selectors: bool
) -> None:
    """celpy (with lark and pendulum) is for jobs that select devices: a job list without
    selectors does not pay for importing it."""
    cluster, jobs = tmp_path / "cluster.yaml", tmp_path / "jobs.yaml"
    cluster.write_text(_CLUSTER)
    jobs.write_text(f"jobs:\n- name: a\n  resources:\n    devices:\n    - {device}\n")
    out, modules = _imported("place", "--cluster", str(cluster), "--jobs", str(jobs), "-o", "json")
    assert [p["node"] for p in json.loads(out)["placements"]] == ["n"], out
    loaded = sorted(m for m in ("celpy", "lark", "pendulum") if m in modules)
    assert loaded == (["celpy", "lark", "pendulum"] if selectors else [])
