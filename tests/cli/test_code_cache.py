"""dataclasses' generated methods kept compiled between runs: the same classes, and never a
reason to fail."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: dataclasses of many kinds, and what their generated methods do, as JSON
_PROBE = r"""
import dataclasses, inspect, json, sys
from dataclasses import InitVar, KW_ONLY, dataclass, field
from hetsched.cli.code_cache import install
if sys.argv[1] == "cached":
    install()

@dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()

@dataclass(order=True)
class Ranked:
    rank: float
    name: str = field(default="n", compare=False)
    seen: list[int] = field(default_factory=list, repr=False)

@dataclass
class Derived:
    base: int
    scale: InitVar[int] = 2
    total: int = field(init=False, default=0)
    _: KW_ONLY
    note: str = ""

    def __post_init__(self, scale: int) -> None:
        self.total = self.base * scale

@dataclass(eq=False, unsafe_hash=False)
class Plain:
    value: object = None

out = {}
p = Point(1, 2, ("a",))
out["point"] = [repr(p), p == Point(1, 2, ("a",)), hash(p) == hash(Point(1, 2, ("a",)))]
try:
    p.x = 3
except dataclasses.FrozenInstanceError as exc:
    out["frozen"] = str(exc)
low, high = Ranked(1.0, "a"), Ranked(2.0, "b")
out["ranked"] = [repr(Ranked(1.5)), low < high, Ranked(1, "a") == Ranked(1, "b")]
d = Derived(3, 4, note="x")
out["derived"] = [repr(d), d.total, str(inspect.signature(Derived))]
out["plain"] = [repr(Plain()), Plain() == Plain(), Point.__doc__, Ranked.__doc__]
out["methods"] = sorted(
    f"{cls.__name__}.{name}:{getattr(cls, name).__qualname__}"
    for cls in (Point, Ranked, Derived, Plain)
    for name in ("__init__", "__repr__", "__eq__", "__setattr__", "__lt__")
    if name in vars(cls)
)
cache = getattr(dataclasses, "exec", None)
out["compiled"] = None if cache is None else cache.__self__.compiled
print(json.dumps(out))
"""


def _probe(cache: Path, how: str, **env: str) -> dict[str, object]:
    environment = {k: v for k, v in os.environ.items() if k != "HETSCHED_NO_CACHE"}
    environment.update(XDG_CACHE_HOME=str(cache), **env)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, how], capture_output=True, text=True, timeout=60,
        env=environment,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _files(cache: Path) -> list[Path]:
    return sorted((cache / "hetsched").glob("dataclass-code-*.marshal"))


def test_classes_made_from_the_cache_are_the_same(tmp_path: Path) -> None:
    plain = _probe(tmp_path, "plain")
    first = _probe(tmp_path, "cached")  # compiles, then saves when the process ends
    assert len(_files(tmp_path)) == 1
    again = _probe(tmp_path, "cached")  # reads them all back
    assert plain["compiled"] is None and first["compiled"] and again["compiled"] == 0
    for probe in (first, again):
        assert {k: v for k, v in probe.items() if k != "compiled"} == {
            k: v for k, v in plain.items() if k != "compiled"
        }


@pytest.mark.parametrize("content", [b"", b"not marshal", b"\xff" * 64])
def test_a_damaged_file_is_compiled_again_and_replaced(tmp_path: Path, content: bytes) -> None:
    _probe(tmp_path, "cached")
    [saved] = _files(tmp_path)
    saved.write_bytes(content)
    assert _probe(tmp_path, "cached")["compiled"]
    assert _probe(tmp_path, "cached")["compiled"] == 0  # the file was written again


def test_a_damaged_entry_is_compiled_again(tmp_path: Path) -> None:
    plain = _probe(tmp_path, "plain")
    _probe(tmp_path, "cached")
    [saved] = _files(tmp_path)
    stored = marshal.loads(saved.read_bytes())
    saved.write_bytes(marshal.dumps({text: b"\x00garbage" for text in stored}))
    again = _probe(tmp_path, "cached")
    assert again["compiled"] == len(stored)
    assert {k: v for k, v in again.items() if k != "compiled"} == {
        k: v for k, v in plain.items() if k != "compiled"
    }


def test_no_cache_means_compiling_as_dataclasses_does(tmp_path: Path) -> None:
    assert _probe(tmp_path, "cached", HETSCHED_NO_CACHE="1")["compiled"]
    assert _files(tmp_path) == []
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the cache folder would go
    assert _probe(blocker, "cached")["compiled"]


def test_place_prints_the_same_with_and_without_the_cache(tmp_path: Path, examples: Path) -> None:
    argv = [sys.executable, "-c", "from hetsched.cli.main import main; main()", "place"]
    argv += ["--cluster", str(examples / "clusters" / "mixed.yaml")]
    argv += ["--jobs", str(examples / "jobs" / "mixed.yaml"), "-o", "json"]
    base = {k: v for k, v in os.environ.items() if k != "HETSCHED_NO_CACHE"}
    base["XDG_CACHE_HOME"] = str(tmp_path)
    outputs = [
        subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=True)
        for env in ({**base, "HETSCHED_NO_CACHE": "1"}, base, base)
    ]
    assert len(_files(tmp_path)) == 1
    assert outputs[0].stdout and len({o.stdout for o in outputs}) == 1
