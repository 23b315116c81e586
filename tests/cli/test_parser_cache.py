"""The CEL parser's tables kept between runs: the same parser, and never a reason to fail."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import pytest
from celpy.celparser import CELParser

from hetsched.cli import parser_cache
from hetsched.cli.parser_cache import load_cel_parser

EXPRESSIONS = [
    'device.attributes["memory_gib"] >= 32',
    'device.attributes["model"] in ["A100", "H100"]',
    '(device.attributes["memory_gib"] >= 40) && device.attributes["model"] in ["A100"]',
    'device.driver == "hetsched.io" && device.attributes["hetsched.io"].model == "H100"',
    "[1, 2, 3].all(x, x > 0) || !true",
    "size('abc') + 2 * 3 - 1 < 10.5 ? 'a' : b\"x\"",
]


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private cache folder, and celpy's parser put back as it was afterwards."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("HETSCHED_NO_CACHE", raising=False)
    before = CELParser.CEL_PARSER
    CELParser.CEL_PARSER = None
    try:
        yield tmp_path / "hetsched"
    finally:
        CELParser.CEL_PARSER = before


def _built_by_celpy() -> Any:
    CELParser.CEL_PARSER = None
    CELParser(tree_class=celpy.InterpretedRunner.tree_node_class)
    return CELParser.CEL_PARSER


def _cached_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("cel-parser-*.pickle"))


def test_the_parser_loaded_from_the_cache_parses_as_celpy_s_own(cache_home: Path) -> None:
    load_cel_parser()  # nothing cached yet: built, then saved
    assert len(_cached_files(cache_home)) == 1
    CELParser.CEL_PARSER = None
    load_cel_parser()
    loaded = CELParser.CEL_PARSER
    assert loaded is not None
    fresh = _built_by_celpy()
    assert loaded is not fresh
    for expression in EXPRESSIONS:
        assert loaded.parse(expression) == fresh.parse(expression), expression
    CELParser.CEL_PARSER = loaded
    env = celpy.Environment()
    program = env.program(env.compile('device.attributes["memory_gib"] >= 32'))
    device = celpy.json_to_cel({"device": {"attributes": {"memory_gib": 80}}})  # type: ignore[attr-defined]
    assert bool(program.evaluate(device)) is True


def test_a_corrupt_cache_file_is_rebuilt_and_replaced(cache_home: Path) -> None:
    load_cel_parser()
    (path,) = _cached_files(cache_home)
    path.write_bytes(b"not a pickle")
    CELParser.CEL_PARSER = None
    load_cel_parser()
    assert CELParser.CEL_PARSER is not None
    assert CELParser.CEL_PARSER.parse("1 + 2") == _built_by_celpy().parse("1 + 2")
    assert path.read_bytes() != b"not a pickle"
    assert not list(cache_home.glob(".cel-parser-*"))  # no temporary file left behind


def test_a_folder_others_can_write_to_is_not_used(cache_home: Path) -> None:
    cache_home.mkdir(mode=0o700)
    os.chmod(cache_home, 0o777)
    load_cel_parser()
    assert CELParser.CEL_PARSER is not None
    assert parser_cache.cache_file("grammar", "builder") is None
    assert not _cached_files(cache_home)


def test_hetsched_no_cache_turns_it_off(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETSCHED_NO_CACHE", "1")
    load_cel_parser()
    assert CELParser.CEL_PARSER is not None
    assert not cache_home.exists()


def test_a_folder_that_cannot_be_made_means_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_home: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file where the folder would go
    load_cel_parser()
    assert CELParser.CEL_PARSER is not None


@pytest.mark.parametrize(
    ("grammar", "builder"), [("g1", "b"), ("g2", "b"), ("g1", "b2")], ids=["g1", "g2", "b2"]
)
def test_another_grammar_or_builder_is_another_file(
    cache_home: Path, grammar: str, builder: str
) -> None:
    path = parser_cache.cache_file(grammar, builder)
    assert path is not None and path.parent == cache_home
    others = {parser_cache.cache_file(g, b) for g, b in [("g1", "b"), ("g2", "b"), ("g1", "b2")]}
    assert len(others) == 3 and path in others


def test_place_prints_the_same_with_the_parser_built_saved_and_loaded(
    examples: Path, tmp_path: Path
) -> None:
    jobs = examples / "jobs" / "mixed.yaml"
    assert "selector" in jobs.read_text()  # the run compiles selectors
    argv = [sys.executable, "-c", "from hetsched.cli.main import main; main()", "place"]
    argv += ["--cluster", str(examples / "clusters" / "mixed.yaml"), "--jobs", str(jobs)]
    argv += ["-o", "json"]
    base = {k: v for k, v in os.environ.items() if k != "HETSCHED_NO_CACHE"}
    base["XDG_CACHE_HOME"] = str(tmp_path)
    outputs = []
    # without the cache, then building and saving the tables, then loading them
    for env in ({**base, "HETSCHED_NO_CACHE": "1"}, base, base):
        done = subprocess.run(argv, capture_output=True, check=True, env=env, timeout=120)
        outputs.append(done.stdout)
    assert _cached_files(tmp_path / "hetsched")
    assert outputs[0] == outputs[1] == outputs[2]
