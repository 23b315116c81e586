"""members.yaml: every problem with its field path, nothing started on a bad file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.federation.spec import HetschedMemberSpec, KubernetesMemberSpec, parse_members
from hetsched.model.specs import SpecError


def _doc(tmp: Path, **member: Any) -> dict[str, Any]:
    token = tmp / "t.token"
    token.write_text("hs_secret\n")
    base: dict[str, Any] = {
        "name": "a",
        "kind": "hetsched",
        "url": "http://127.0.0.1:8780",
        "token_file": str(token),
    }
    base.update(member)
    return {"federation": "fed", "members": [base]}


def test_a_good_file(tmp_path: Path) -> None:
    doc = _doc(tmp_path, labels={"region": "eu-west", "cost": "2"})
    doc["members"].append(
        {"name": "k", "kind": "kubernetes", "host": "http://127.0.0.1:6443", "image": "busybox"}
    )
    doc["lease"] = "45s"
    spec = parse_members(doc)
    assert spec.lease == 45.0 and spec.margin == 2.0
    first, second = spec.members
    assert isinstance(first, HetschedMemberSpec) and first.token() == "hs_secret"
    assert isinstance(second, KubernetesMemberSpec) and second.namespace == "default"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"url": "ftp://x"}, "members[0].hetsched.url: String should match pattern"),
        ({"name": "../a"}, "members[0].hetsched.name: String should match pattern"),
        ({"kind": "slurm"}, "members[0]: Input tag 'slurm' found using 'kind' does not match"),
        ({"labels": {"hetsched.io/x": "1"}}, "members[0].hetsched.labels: 'hetsched.io/x'"),
        ({"labels": {"region": "a b"}}, "members[0].hetsched.labels: label region"),
        ({"token_file": None}, "give exactly one of token_file and token_env"),
        ({"token_env": "HS_NOT_SET_ANYWHERE"}, "give exactly one of token_file and token_env"),
        ({"timeout": "soon"}, "members[0].hetsched.timeout: not a duration"),
        ({"extra": 1}, "members[0].hetsched.extra: Extra inputs are not permitted"),
    ],
)
def test_bad_members_name_the_field(tmp_path: Path, change: dict[str, Any], error: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_members(_doc(tmp_path, **change))
    assert any(error in e for e in caught.value.errors), caught.value.errors


@pytest.mark.parametrize(
    ("top", "error"),
    [
        ({"lease": "1s"}, "lease: Input should be greater than or equal to 2"),
        ({"federation": "a/b"}, "federation: String should match pattern"),
        ({"members": []}, "members: List should have at least 1 item"),
        ({"margin": -1}, "margin: must not be negative"),
    ],
)
def test_bad_top_level_fields(tmp_path: Path, top: dict[str, Any], error: str) -> None:
    doc = {**_doc(tmp_path), **top}
    with pytest.raises(SpecError) as caught:
        parse_members(doc)
    assert any(error in e for e in caught.value.errors), caught.value.errors


def test_unreadable_tokens_and_twice_listed_members(tmp_path: Path) -> None:
    doc = _doc(tmp_path, token_file=str(tmp_path / "missing.token"))
    doc["members"].append(dict(doc["members"][0]))
    with pytest.raises(SpecError) as caught:
        parse_members(doc)
    assert caught.value.errors == ["members: member 'a' is listed twice"]
    doc["members"].pop()
    with pytest.raises(SpecError) as caught:
        parse_members(doc)
    assert caught.value.errors[0].startswith("members[0].token_file: cannot read")


def test_the_check_command(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "members.yaml"
    path.write_text(yaml.safe_dump(_doc(tmp_path)))
    result = CliRunner().invoke(app, ["federation", "check", str(path)])
    assert (
        result.exit_code == 0 and "federation fed: lease 30s, members a (hetsched)" in result.output
    )
    path.write_text(yaml.safe_dump(_doc(tmp_path, url="nope")))
    result = CliRunner().invoke(app, ["federation", "check", str(path)])
    assert result.exit_code == 2 and "members[0].hetsched.url" in result.output
