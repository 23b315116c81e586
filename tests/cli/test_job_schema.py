"""One job schema: ``check`` and ``place`` accept every jobs file ``submit`` accepts (a job
with a ``command`` is held to the API's rules) and say which fields placement ignores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner

from hetsched.cli.jobfile import resolve_workdirs, validate_job_file
from hetsched.cli.main import app
from hetsched.controlplane.schemas import parse_batch
from hetsched.model.specs import SpecError


def invoke(*args: str) -> tuple[int, str]:
    # CliRunner's stdout is a pipe, not a terminal, and 80 columns wide
    result = CliRunner().invoke(app, list(args), terminal_width=80)
    return result.exit_code, result.output


def test_check_accepts_the_demo_workload_and_names_what_placement_ignores(
    examples: Path,
) -> None:
    code, out = invoke("check", str(examples / "workloads" / "demo.yaml"))
    assert code == 0, out
    assert "valid jobs" in out
    assert "note: placement ignores command, workdir" in out
    assert "note: later: not read" in out
    assert "Extra inputs" not in out
    code, out = invoke("check", str(examples / "workloads" / "demo.yaml"), "-o", "json")
    doc = json.loads(out)
    assert doc["valid"] is True and doc["kind"] == "jobs"
    assert len(doc["normalized"]["jobs"]) == 10
    embed = doc["normalized"]["jobs"][8]
    # the relative workdir as submit sends it: absolute, against the file's folder
    assert embed["name"] == "batch-embed"
    assert embed["workdir"] == str((examples / "jobs" / "checkpointing").resolve())


def test_place_takes_the_demo_workload(examples: Path) -> None:
    args = ["place", "--cluster", str(examples / "clusters" / "demo.yaml")]
    args += ["--jobs", str(examples / "workloads" / "demo.yaml")]
    args += ["--profile", str(examples / "profiles" / "demo.yaml")]
    code, out = invoke(*args, "-o", "json")
    assert code == 0, out
    doc = json.loads(out)
    assert {p["job"] for p in doc["placements"]} >= {"etl-0", "batch-embed", "allreduce"}
    assert doc["pending"] == [] and doc["stranded"]["stranded"] == 0
    assert doc["ignored"][0].startswith("placement ignores command, workdir")
    code, out = invoke(*args)
    assert code == 0 and "note: placement ignores command, workdir" in out


@pytest.mark.parametrize(
    "name", ["jobs/checkpointing/train.yaml", "jobs/speed/train.yaml", "workloads/demo.yaml"]
)
def test_every_runnable_example_checks(examples: Path, name: str) -> None:
    code, out = invoke("check", str(examples / name))
    assert code == 0, out


def test_a_job_with_a_command_is_held_to_the_services_rules(tmp_path: Path) -> None:
    """A name with a space is fine for placement, not for a job submit would send."""
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n"
        "  - {name: 'a b', resources: {cpu: 1}}\n"
        "  - {name: 'c d', resources: {cpu: 1}, command: [true]}\n"
        "  - {name: ok, resources: {cpu: 1}, command: [true], env: {LD_PRELOAD: x}}\n"
    )
    code, out = invoke("check", str(path), "-o", "json")
    assert code == 2
    errors = json.loads(out)["errors"]
    assert any(e.startswith("jobs[1].name: must be 1-63 characters") for e in errors), errors
    assert any(e.startswith("jobs[2].env: ") and "LD_PRELOAD" in e for e in errors), errors
    assert not any(e.startswith("jobs[0]") for e in errors), errors


def test_a_single_job_mapping_and_repeated_names(tmp_path: Path) -> None:
    one = tmp_path / "one.yaml"
    one.write_text("name: solo\nresources: {cpu: 2}\ncommand: [sleep, '1']\n")
    code, out = invoke("check", str(one))
    assert code == 0 and "valid jobs" in out, out
    twice = tmp_path / "twice.yaml"
    twice.write_text(
        "jobs:\n"
        "  - {name: same, resources: {cpu: 1}, command: ['true']}\n"
        "  - {name: same, resources: {cpu: 1}, command: ['true']}\n"
    )
    # the service gives each its own id, so placement places both
    assert [j.name for j in validate_job_file(json.loads(json.dumps(_load(twice)))).build()] == [
        "same",
        "same",
    ]


def _load(path: Path) -> Any:
    from hetsched.model.specs import load_yaml

    return load_yaml(path)


_names = st.sampled_from(["train", "a b", "x" * 64, "ok-1", ""])
_cpus = st.sampled_from(["1", "500m", 0, "lots", 20_000])
_replicas = st.sampled_from([1, 2, 1001, 0])
_workdirs = st.sampled_from([None, ".", "/tmp", "sub/dir"])
_envs = st.sampled_from([None, {"A": "1"}, {"HETSCHED_X": "1"}, {"1A": "x"}])
_commands = st.sampled_from([["true"], [""], ["sh", "-c", "echo hi"]])


@st.composite
def _bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": draw(_names),
        "command": draw(_commands),
        "replicas": draw(_replicas),
        "resources": {"cpu": draw(_cpus)},
    }
    for key, value in (("workdir", draw(_workdirs)), ("env", draw(_envs))):
        if value is not None:
            body[key] = value
    return body


@settings(max_examples=150, deadline=None)
@given(st.lists(_bodies(), min_size=1, max_size=3))
def test_check_accepts_whatever_the_service_accepts(bodies: list[dict[str, Any]]) -> None:
    """What the service would store (submit's batch, as submit sends it) check accepts; and
    what check refuses of a job with a command, the service refuses too."""
    folder = Path("/srv/jobs")
    try:
        parse_batch(json.dumps({"jobs": resolve_workdirs(bodies, folder)}))
        service_ok = True
    except ValidationError:
        service_ok = False
    try:
        validate_job_file({"jobs": bodies}, "f.yaml", folder)
        check_ok = True
    except SpecError:
        check_ok = False
    assert check_ok == service_ok


def test_check_parses_a_submission_as_the_service_does(tmp_path: Path) -> None:
    """Strictly, from the JSON submit sends: a quoted number is no priority there."""
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n"
        "  - {name: a, priority: '5', resources: {cpu: 1}, command: ['true']}\n"
        "  - {name: b, priority: '5', resources: {cpu: 1}}\n"
    )
    code, out = invoke("check", str(path), "-o", "json")
    assert code == 2
    errors = json.loads(out)["errors"]
    assert [e.split(":")[0] for e in errors] == ["jobs[0].priority"], errors
