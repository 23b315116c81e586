"""docs/evaluation.md and bench/claims.py tell the same story: every claim of the registry
is a row of the doc's table with the same split and status, every row is a claim, the
split's seed sets do not overlap, and every command runs a script or command that exists."""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "evaluation.md"


def _registry() -> Any:
    spec = importlib.util.spec_from_file_location("claims", ROOT / "bench" / "claims.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["claims"] = module
    spec.loader.exec_module(module)
    return module


claims = _registry()


def _rows() -> dict[str, list[str]]:
    """The doc's claims table: claim id -> its cells."""
    text = DOC.read_text(encoding="utf-8")
    table = text.split("## Every claim, its split and its command", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] not in ("claim", "---"):
            rows[cells[0]] = cells
    return rows


def _seeds(text: str) -> set[int]:
    """``1-4``, ``0, 1``, ``100-107``: the seeds a split's cell names (none for prose)."""
    found: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", part)
        if match is None:
            return set()
        low = int(match.group(1))
        found.update(range(low, int(match.group(2) or low) + 1))
    return found


def test_every_claim_is_a_row_and_every_row_a_claim() -> None:
    rows = _rows()
    assert len(rows) >= 5, "the table parser finds nothing"
    assert sorted(rows) == sorted(c.id for c in claims.CLAIMS)


@pytest.mark.parametrize("claim", claims.CLAIMS, ids=lambda c: c.id)
def test_a_row_says_what_the_registry_says(claim: Any) -> None:
    row = _rows()[claim.id]
    assert row[1] == claim.says
    assert f"({claim.doc})" in row[2]
    assert row[3] == claim.measured_on
    assert row[4] == claim.status


@pytest.mark.parametrize("claim", claims.CLAIMS, ids=lambda c: c.id)
def test_a_claim_can_be_measured_again(claim: Any) -> None:
    assert claim.measured_on in claims.SPLITS[claim.family]
    # every claim can be measured on the split its number came from
    assert claim.measured_on in claim.commands
    for split in claim.commands:
        for command in claims.commands(claim, split, Path("/traces"), Path("/out")):
            argv = shlex.split(command)
            script = argv[1] if argv[0].endswith("python") else argv[0]
            assert (ROOT / script).is_file(), f"{claim.id}: {script} does not exist"
            assert "{" not in command, f"{claim.id}: a placeholder left in {command}"


@pytest.mark.parametrize("family", sorted(claims.SPLITS))
def test_tuning_and_test_seeds_do_not_overlap(family: str) -> None:
    splits = claims.SPLITS[family]
    tuning, test = _seeds(splits["tuning"]["seeds"]), _seeds(splits["test"]["seeds"])
    if family != "replays":  # named workloads against synth seeds: nothing to compare
        assert tuning and test
    assert not tuning & test
    assert not _seeds(splits["development"]["seeds"]) & test


def test_the_doc_states_the_registrys_split() -> None:
    text = DOC.read_text(encoding="utf-8")
    for family, splits in claims.SPLITS.items():
        for split, cells in splits.items():
            for value in cells.values():
                if value != "-":
                    assert value in text, f"{family} {split}: {value!r} is not in the doc"


def test_an_unknown_split_is_refused_naming_the_ones_it_has() -> None:
    claim = next(c for c in claims.CLAIMS if "test" not in c.commands)
    with pytest.raises(SystemExit, match="has no 'test' commands"):
        claims.commands(claim, "test", Path("/traces"), Path("/out"))
