"""safe_load gives what PyYAML's C loader gives, for every kind of document.

Every comparison is typed (``True`` is not ``1``, ``1`` is not ``1.0``) and ordered (a
mapping's keys in PyYAML's order). Where the plain path builds a document from the parser's
events, its value must equal PyYAML's C loader's (libyaml parses both); where it leaves the
document to PyYAML, ``safe_load`` gives the C loader's value or raises the C loader's error.
"""

from __future__ import annotations

import copy
import datetime
import importlib.util
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import ROOT
from hetsched.model import yamlio
from hetsched.model.yamlio import safe_load

_C_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DECLINED: Any = object()


def typed(value: Any) -> Any:
    """The value with every type spelled out, and mappings as ordered pairs."""
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    return (type(value).__name__, repr(value))


def plain(text: str | bytes) -> Any:
    """The document as the plain path builds it, or _DECLINED when it leaves it to PyYAML."""
    loader = yamlio._Loader(text)
    try:
        return loader.plain_document()
    except Exception:  # declined, or an error: PyYAML's loader reads it
        return _DECLINED
    finally:
        loader.dispose()


def outcome(load: Any, text: str | bytes) -> Any:
    """The typed value, or the error's type and message."""
    try:
        return typed(load(text))
    except Exception as error:  # the error is the outcome compared
        return (type(error).__name__, str(error))


def c_load(text: str | bytes) -> Any:
    return yaml.load(text, Loader=_C_LOADER)


def check(text: str) -> bool:
    """Assert ``safe_load`` agrees with PyYAML's C loader on ``text``; answers whether the
    plain path built it."""
    expected = outcome(c_load, text)
    assert outcome(safe_load, text) == expected
    assert outcome(safe_load, text.encode()) == outcome(c_load, text.encode())
    value = plain(text)
    if value is _DECLINED:
        return False
    assert typed(value) == expected
    return True


#: documents of every shape: each reads as PyYAML's C loader reads it
CASES = [
    "a: 1\n",
    "a: 1",
    "a: 1\r\nb:\r\n- x # c\r\n\r\n",
    "a:  b\nc:   \nd:",
    "a: [b] # c\nd: [ a , b ]\ne: [-1, -x]\n",
    "\"a #b\": 1\n'c: d': 2\n",
    "a: 1\n  # deeper comment\nb: 2\n",
    "---\n- - - - a\n      - b\n    - c\n",
    "---\na: 1\n",
    "--- \na: 1\n",
    "  a: 1\n  b: 2\n",
    "- a\n- b\n",
    "- - a\n  - b\n- c\n",
    "- - - a\n",
    "- -\n",
    "-\n",
    "-\n- a\n",
    "-\n  a: 1\n",
    "-\n  - a\n",
    "- - \n    x: 1\n  - b\n",
    "a:\n",
    "a:\nb:\n",
    "a:\n- x\n- y\nb: 1\n",
    "a:\n  - x\n  - y\nb:\n  c: 1\n",
    "- a:\n  - x\n  b: 1\n",
    "- a:\n- x\n",
    "- a:\n    b: 1\n  c: 2\n",
    "a:\n   b: 1\nc: 2\n",
    "a: 1\nb: 2\na: 3\n",
    "a: 1\nb: 2\na:\n  c: 3\n",
    "# top\n\na: 1 # one\n  # deeper comment\nb: 'x' # two\n#c: 3\n",
    "a: # the list\n  - x\n",
    "- # null\n- x\n",
    "a: b#c\nd: e #f\n",
    "a: 'it''s'\nb: \"say 'hi'\"\nc: ''\nd: \"\"\n",
    "'a b': 1\n\"c: d\": 2\n'': 3\n",
    "a: b c  d\n",
    "a: x]\nb: x}\nc: a, b\nd: x [y]\n",
    "a:b: c\n",
    "- a:b\n- a :b\n",
    "a: -x\nb: -1\nc: --x\n",
    "url: http://example.com:80/x\n",
    "a: [A100, H100]\nb: []\nc: {}\nd: [ ]\ne: { }\n",
    "a: [1, 'x, y', \"z\", 2.5, true, ~, a b]\n",
    "- [a, b]\n- []\n",
    "a: [1,2]\n",
    "a: {b: 1}\n",
    "a: [[1]]\n",
    "a: {b: 1, c: [x, y], d: {e: ~, f: {}}, g: []}\n",
    "a: { b: 1 ,c: 2 }\n",
    "a: {b: 1,c: 2}\n",
    "a: {b:  1}\n",
    "a: [{b: 1}, [c, [d]], {}, []]\n",
    "- {class: gpu, vendor: nvidia, count: 8, attributes: {memory_gib: 80}}\n",
    "- {class: gpu, model: [A100, H100]} # two models\n",
    "labels: {zone: z1, rack: r3}\ndevices: [{class: gpu, count: 8}]\n",
    "a: {1: x, 2.5: y, true: z, null: w, ~: v, 2001-12-14: u}\n",
    "a: {b: 1, b: 2, c: 3, b: 4}\n",
    "a: {.nan: 1, .nan: 2}\n",
    "a: {'b, c': \"d: e\", 'f''g': '#h'}\n",
    "a: {b c: d e, f: -1, g: -x, h: a - b, i: a!b&c*d}\n",
    "a: [2001-12-14, {b: 2002-01-02}, 2001-12-14, {2001-12-14: c}]\n",
    "a: [2001-12-14 21:59:43.10]\n",
    "a: {b: yes, c: No, d: 0o17, e: 0x1F, f: .inf, g: 1e3}\n",
    "a: {b: é, 中文: 😀}\n",
    "a: {b: 1}\r\nc: [{d: 2}]\r\n",
    "a: {b: [1, 2]}\nc: {b: [1, 2]}\n- x\n",
    "a: " + "[" * 20 + "]" * 20 + "\n",
    "a: yes\nb: No\nc: on\nd: OFF\ne: y\nf: n\n",
    "a: 0o17\nb: 017\nc: 0x1F\nd: 1_000\ne: 1:30\nf: 190:20:30\ng: 0b101\n",
    "a: ~\nb: null\nc: Null\nd: NULL\ne: nULL\n",
    "a: .inf\nb: -.Inf\nc: .NaN\nd: 1e3\ne: 1.0e+3\nf: 6.8523015e+5\ng: 1_0.5\n",
    "a: 2001-12-14\nb: 2001-12-14t21:59:43.10-05:00\nc: 2001-12-14 21:59:43.10\n",
    "1: one\n2.5: two\ntrue: three\nnull: four\n~: five\n2001-12-14: six\n",
    "1: a\n1.0: b\ntrue: c\n",
    ".nan: a\n.nan: b\n",
    "yes: 1\non: 2\n",
    "a: é ü 中文 😀\nключ: значение\n",
    "a: \xa0x\n",
    "- name: a\n  cpu: '8'\n  devices:\n  - class: gpu\n    count: 2\n",
    # the block reader of earlier versions left these to PyYAML
    "",
    "# only a comment\n",
    "plain\n",
    "--- x\n...\n",
    "a: 1\n---\nb: 2\n",
    "a: 1\n...\n",
    "a: &x 1\nb: *x\n",
    "a: !!str 1\n",
    "a: |\n  x\n",
    "a: >\n  x\n",
    "a: [a: b]\n",
    "a: [1, ]\n",
    "a: {b: 1, }\n",
    "a: [1, , 2]\n",
    "a: [, 1]\n",
    "a: {, b: 1}\n",
    "a: {b}\n",
    "a: {b, c: 1}\n",
    "a: {b: }\n",
    "a: {b: , c: 1}\n",
    "a: {b:1}\n",
    "a: {b:[1]}\n",
    "a: {'b':1}\n",
    "a: {b : 1}\n",
    "a: {b :c}\n",
    "a: {b: c: d}\n",
    "a: {b: c d: e}\n",
    "a: {[b]: c}\n",
    "a: {{b: 1}: c}\n",
    "a: {? b: c}\n",
    "a: [? b]\n",
    "a: [- b]\n",
    "a: {b: - c}\n",
    "a: {b: c]\n",
    "a: [b}\n",
    "a: [b]]\n",
    "a: [b] c]\n",
    "a: {b: 1} {c: 2}\n",
    "a: [b, c:d]\n",
    "a: {b: c:d}\n",
    "a: {b: x#y}\n",
    "a: {b: x #y}\n",
    "a: {b: 'x'y}\n",
    "a: ['x' 'y']\n",
    "a: {b: &x 1, c: *x}\n",
    "a: {b: !!str 1}\n",
    "a: {<<: {c: 1}}\n",
    "a: {b: =}\n",
    "a: {b: 2001-02-30}\n",
    "a: {b: 1,\n  c: 2}\n",
    "a: [1, [2,\n  3]]\n",
    "a: " + "[" * 30 + "]" * 30 + "\n",
    "a: {b: [1, 2]}}\n",
    "a: [1,\n  2]\n",
    "? a\n: b\n",
    "%YAML 1.1\n---\na: 1\n",
    "a: x\n  y\n",
    "a: x\n\n  y\n",
    "- x\n  y\n",
    "- x\n  - y\n",
    "a: 'x\n  y'\n",
    'a: "x\\ty"\n',
    "a:\tb\n",
    "a: 1\rb: 2\r",
    "a: 1\r\nb: 2\rc: 3\r\n",
    "a: 'x\r\n  y'\r\n",
    "\ufeffa: 1\n",
    "a: \x85b\n",
    "a: b\u2028c\n",
    "a: b: c\n",
    "a: - b\n",
    "a: 1\n- b\n",
    "- a\nb: 1\n",
    "a:\n  - x\n- y\n",
    "a: 1\n b: 2\n",
    "- a: 1\n  - b\n",
    "-\n  a: 1\n b: 2\n",
    "a:\n    b: 1\n  c: 2\n",
    "  a: 1\nb: 2\n",
    "a: 'x'#c\n",
    "a: [b]#c\n",
    "a: [-]\n",
    "'a':b\n",
    "-#c\n",
    "a: b:c:\n",
    "a: {}\n  b: 1\n",
    "a: []\n- x\n",
    "a: b :c d: e\n",
    "a : 1\n",
    "-  a\n",
    "<<: {a: 1}\n",
    "a: <<\n",
    "a: =\n",
    "a: 2001-02-30\n",
    "a: @x\n",
    "a: `x\n",
    "a: %x\n",
    "a: ?x\n",
    "a: :x\n",
    "---a: 1\n",
    "...: 1\n",
    "x" * 300 + ": 1\n",
    "a:\n" + "".join(" " * (2 * i) + f"k{i}:\n" for i in range(1, 120)),
]


@pytest.mark.parametrize("text", CASES)
def test_literal_cases(text: str) -> None:
    check(text)


#: (document, built from the events without PyYAML's composer)
PATHS = [
    ("a: 1\nb: [x, {c: 'd'}]\n", True),
    ("a: |\n  two\n  lines\nb: >\n  folded\n", True),
    ("a: {b: [1,\n  2]}\n", True),
    ("a: 1\nb: 2\na: 3\n", True),
    ("a: yes\nb: ~\nc: 1.5\nd: 0x1F\ne: 1:30\n", True),
    ("---\na: 1\n...\n", True),
    ("", False),
    ("a: &x 1\nb: *x\n", False),
    ("a: &x 1\n", False),
    ("a: !!str 1\n", False),
    ("a: !!binary aGk=\n", False),
    ("a: 2026-11-30\n", False),
    ("base: {c: 1}\ntwo:\n  <<: {d: 2}\n", False),
    ("1: one\n", False),
    ("? [a]\n: b\n", False),
    ("--- 1\n--- 2\n", False),
    ("a: =\n", False),
    ("a: [1, 2\n", False),
    ("x" * 1100 + ": 1\n", False),  # libyaml's limit on a key's length: PyYAML's error
]


@pytest.mark.parametrize(("text", "built"), PATHS)
def test_what_the_plain_path_builds_and_what_it_leaves_to_pyyaml(text: str, built: bool) -> None:
    assert check(text) == built


def test_bytes_in_any_encoding_read_as_pyyaml_reads_them() -> None:
    for data in (b"a: \xff\n", "a: \u00e9\n".encode("utf-16"), b"\xef\xbb\xbfa: 1\n"):
        assert outcome(safe_load, data) == outcome(c_load, data)


def test_a_stream_is_read_by_pyyaml(tmp_path: Any) -> None:
    path = tmp_path / "doc.yaml"
    path.write_text("a: [1,\n")
    with path.open() as handle, pytest.raises(yaml.YAMLError) as error:
        safe_load(handle)
    assert "doc.yaml" in str(error.value)  # PyYAML's marks name the file
    path.write_text("a: 1\n")
    with path.open("rb") as handle:
        assert safe_load(handle) == {"a": 1}


def test_values_that_are_not_strings_are_pyyaml_s_own() -> None:
    doc = safe_load("a: 2001-12-14\nb: 2001-12-14t21:59:43.10-05:00\nc: 1:30\nd: 0o17\n")
    assert doc["a"] == datetime.date(2001, 12, 14)
    assert doc["b"].utcoffset() == datetime.timedelta(hours=-5)
    assert doc["c"] == 90
    assert doc["d"] == "0o17"  # YAML 1.1: not an octal number
    # PyYAML builds every .nan as one float object: two .nan keys are one key
    assert len(safe_load(".nan: a\n.nan: b\n")) == len(yaml.safe_load(".nan: a\n.nan: b\n"))


def test_constructors_added_for_the_loader_s_tags_are_used() -> None:
    class Loader(yamlio._Loader):
        pass

    Loader.add_constructor("tag:yaml.org,2002:int", lambda loader, node: ("int", node.value))
    loader = Loader("a: 7\nb: '7'\n")
    try:
        assert loader.plain_document() == {"a": ("int", "7"), "b": "7"}
    finally:
        loader.dispose()


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("place_e2e", ROOT / "bench" / "place_e2e.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bench_files_take_the_plain_path(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()
    # block style, and leaf collections on one line in flow style (as written by hand)
    texts = [
        yaml.safe_dump(doc, sort_keys=False, default_flow_style=style)
        for doc in (bench.cluster_doc(300), bench.jobs_doc(300))
        for style in (False, None)
    ]
    assert "{" in texts[1] and "{" in texts[3]
    for text in texts:
        assert check(text)

    def refuse(*_args: Any) -> Any:
        raise AssertionError("PyYAML's own loader was asked to read a plain document")

    monkeypatch.setattr(yamlio, "_pyyaml_load", refuse)
    for text in texts:
        assert typed(safe_load(text)) == typed(yaml.safe_load(text))
        assert typed(safe_load(text.encode())) == typed(yaml.safe_load(text))


# -- generated documents ------------------------------------------------------------------

#: scalars YAML 1.1 reads as something else than the text, and texts that look like syntax
# fmt: off
TRICKY = [
    "yes", "no", "on", "off", "y", "n", "Yes", "NO", "True", "false", "~", "null", "Null",
    "0o17", "017", "0x1F", "1_000", "1:30", "-1:30", "190:20:30", "0b101", "+12", "-0",
    ".inf", "-.inf", ".NaN", "1e3", "1.0e+3", "1.5", "-2.5", "1_0.5", ".5", "5.",
    "2001-12-14", "2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10", "2002-2-3",
    "<<", "=", "", " ", " lead", "trail ", "a b", "a  b", "a: b", "a:b", "a #b", "a#b",
    "#a", "- a", "-a", "--", "---", "...", "? a", "?a", ":a", "a:", "'a'", '"a"', "it's",
    'say "hi"', "[a]", "{a}", "a, b", "&a", "*a", "!a", "|", ">", "%a", "@a", "`a",
    "é", "中文", "😀", "\xa0", "12", "007", "1.0", "3e", "0x", "tab\tin", "back\\slash",
]
# fmt: on
_CHARS = st.characters(exclude_categories=("Cs",), exclude_characters="\x85\u2028\u2029\ufeff")
_TEXT = st.one_of(st.sampled_from(TRICKY), st.text(_CHARS, max_size=12))
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.dates(),
    _TEXT,
)
_KEYS = st.one_of(_TEXT, st.integers(-5, 5), st.booleans(), st.none())
_DATA = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=30,
)
_STYLES = st.fixed_dictionaries(
    {
        "default_flow_style": st.sampled_from([False, None, None, True]),
        "sort_keys": st.booleans(),
        "width": st.sampled_from([20, 80, 10_000]),
        "allow_unicode": st.booleans(),
        "explicit_start": st.booleans(),
        "indent": st.sampled_from([2, 4]),
    }
)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.dictionaries(_KEYS, _DATA, max_size=6), st.lists(_DATA, max_size=6)), _STYLES)
def test_documents_pyyaml_writes_read_the_same(data: Any, style: dict[str, Any]) -> None:
    try:
        text = yaml.safe_dump(data, **style)
    except yaml.YAMLError:
        return  # a key PyYAML cannot write
    check(text)
    check(text.replace("\n", "\r\n"))  # as written on Windows


# fmt: off
_PLAIN_WORDS = [
    "gpu", "A100", "node-1", "4", "16Gi", "0.5", "true", "no", "~", "null", "1:30", "0o17",
    "2026-11-30", "a b", "a#b", "x]", "-1", "-x", "a:b", ".inf", "1_000", "on", "é",
]
# fmt: on


def _quoted(text: str, double: bool) -> str:
    if double:
        return '"' + text + '"'
    return "'" + text.replace("'", "''") + "'"


@st.composite
def _scalar_text(draw: Any) -> str:
    kind = draw(st.sampled_from(["plain", "single", "double"]))
    if kind == "plain":
        return str(draw(st.sampled_from(_PLAIN_WORDS)))
    text = draw(st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), max_size=8))
    text = text.replace("\u2028", "").replace("\u2029", "").replace("\ufeff", "")
    if kind == "double":
        text = text.replace('"', "").replace("\\", "")
    return _quoted(text, kind == "double")


@st.composite
def _key_text(draw: Any) -> str:
    key = draw(_scalar_text())
    return key if key.strip("'\"") or key in ("''", '""') else "k"


_FLOW_WORDS = ["a", "'b, c'", '"d"', "1", "yes", "x y", "-1", "~", "2026-11-30", "a-b"]


def _flow_gap(draw: Any) -> str:
    return str(draw(st.sampled_from(["", "", " ", "  "])))


@st.composite
def _flow_collection(draw: Any, depth: int) -> str:
    """A one-line flow sequence or mapping, nested, in hand-written spacings."""
    entries: list[str] = []
    mapping = draw(st.booleans())
    for _ in range(draw(st.integers(0, 4))):
        if depth > 0 and draw(st.integers(0, 2)) == 0:
            value = draw(_flow_collection(depth - 1))
        elif draw(st.booleans()):
            value = draw(st.sampled_from(_FLOW_WORDS))
        else:
            value = draw(_scalar_text())
        if mapping:
            value = draw(_key_text()) + ":" + draw(st.sampled_from([" ", " ", "  "])) + value
        entries.append(_flow_gap(draw) + value + _flow_gap(draw))
    opening, closing = "{}" if mapping else "[]"
    return opening + ",".join(entries or [_flow_gap(draw)]) + closing


def _comment(draw: Any) -> str:
    return str(draw(st.sampled_from(["", "", "", " # note", "  #: x"])))


@st.composite
def _block(draw: Any, indent: int, depth: int) -> list[str]:
    """Lines of a block mapping or sequence at ``indent``, in hand-written styles."""
    pad = " " * indent
    lines: list[str] = []
    mapping = draw(st.booleans())
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 5)) == 0:
            lines.append(draw(st.sampled_from(["", "  ", pad + "# comment", "#", "   # x"])))
        head = pad + (draw(_key_text()) + ":" if mapping else "-")
        shape = draw(st.sampled_from(["scalar", "flow", "nested", "nested", "compact", "null"]))
        if depth == 0 or shape == "scalar":
            lines.append(head + " " + draw(_scalar_text()) + _comment(draw))
        elif shape == "flow":
            lines.append(head + " " + draw(_flow_collection(2)) + _comment(draw))
        elif shape == "null":
            lines.append(head + _comment(draw))
        elif shape == "compact" and not mapping:
            inner = draw(_block(indent + 2, depth - 1))
            lines.append(head + " " + inner[0][indent + 2 :])
            lines.extend(inner[1:])
        else:
            step = draw(st.sampled_from([2, 4] if not mapping else [0, 2, 4, 1]))
            inner = draw(_block(indent + step, depth - 1))
            if mapping and step == 0 and not inner[0].lstrip().startswith("-"):
                inner = draw(_block(indent + 2, depth - 1))
            lines.append(head + _comment(draw))
            lines.extend(inner)
    return lines


def _first_content(lines: list[str]) -> list[str]:
    """The lines without leading blank and comment lines (a compact item needs its first
    line to be content)."""
    while lines and not lines[0].strip(" ").lstrip("#").strip():
        lines = lines[1:]
    return lines


@st.composite
def _document(draw: Any) -> str:
    lines = _first_content(draw(_block(0, 3)))
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n"]))


@settings(max_examples=200, deadline=None)
@given(_document())
def test_hand_written_documents_read_the_same(text: str) -> None:
    check(text)
    check(text.replace("\n", "\r\n"))


_INSERTS = [
    *":-# '\"[]{}&*!|>?,%@`\\\t\r\nx1. ",
    *["\n  ", ": ", "- ", " #", "\ufeff", ", ", ",", "{a: 1}", "[x]", "{}", "[]", "? ", "a:"],
]


@st.composite
def _mutated(draw: Any) -> str:
    text = draw(st.one_of(_document(), _dumped()))
    lines = text.split("\n")
    at = draw(st.integers(0, len(lines) - 1))
    how = draw(st.sampled_from(["delete", "duplicate", "indent", "dedent", "insert", "insert"]))
    if how == "delete":
        del lines[at]
    elif how == "duplicate":
        lines.insert(at, lines[at])
    elif how == "indent":
        lines[at] = " " * draw(st.integers(1, 3)) + lines[at]
    elif how == "dedent":
        lines[at] = lines[at][draw(st.integers(1, 3)) :]
    else:
        line = lines[at]
        where = draw(st.integers(0, len(line)))
        lines[at] = line[:where] + draw(st.sampled_from(_INSERTS)) + line[where:]
    return "\n".join(lines)


@st.composite
def _dumped(draw: Any) -> str:
    data = draw(st.dictionaries(st.sampled_from(TRICKY), _DATA, max_size=4))
    return yaml.safe_dump(data, **draw(_STYLES))


@settings(max_examples=300, deadline=None)
@given(_mutated())
def test_broken_documents_fail_as_pyyaml_fails_or_read_the_same(text: str) -> None:
    check(text)


@st.composite
def _line(draw: Any, noisy: bool) -> str:
    """One line from a few pieces: indentation, dashes, key, value, comment (``noisy``:
    with pieces outside the subset too)."""
    indent = " " * draw(st.integers(0, 6 if noisy else 4))
    dashes = ["", "", "- ", "- - ", "-", "- -"] + (["-  "] if noisy else [])
    keys = ["", "", "a:", "b:", "'c':", "1:"] + (["a :", "a:b:", "? a"] if noisy else [])
    values = ["", "x", "1", "'y'", "[p, q]", "{}", "x y", "{a: 1, b: [x]}", "[{c: d}, []]"]
    if noisy:
        values += ["- z", "a: b", "{a:1}", "[a, ]", "{a}", "{a: }", "[a: b]", "{[a]: b}"]
    key, value = draw(st.sampled_from(keys)), draw(st.sampled_from(values))
    comment = draw(st.sampled_from(["", "", " # c"] + (["#c"] if noisy else [])))
    return (
        indent
        + draw(st.sampled_from(dashes))
        + key
        + (" " if key and value else "")
        + value
        + comment
    )


@settings(max_examples=300, deadline=None)
@given(st.booleans().flatmap(lambda noisy: st.lists(_line(noisy), min_size=1, max_size=8)))
def test_documents_of_random_lines_read_as_pyyaml_reads_them(lines: list[str]) -> None:
    check("\n".join(lines) + "\n")


_RAW = st.text(st.characters(exclude_categories=("Cs",)), max_size=10) | st.text(
    alphabet=" -?:,[]{}#&*!|>'\"%@`ab1.\\", max_size=8
)
_SHAPES = [
    "{k}: {v}\n",
    "- {v}\n",
    "- {k}: {v}\n",
    "a: [{v}]\n",
    "a: [{k}, {v}]\n",
    "{k}:\n  {v}: 1\n",
    "- [{v}]\n",
    "a: {{{k}: {v}}}\n",
    "- {{x: [{v}], {k}: 1}}\n",
    "a: [{{{k}: {v}}}, {v}]\n",
    "a: {{b: {{{k}: [{v}]}}}}\n",
]


@settings(max_examples=300, deadline=None)
@given(_RAW, _RAW, st.sampled_from(_SHAPES))
def test_any_text_as_a_key_or_value_reads_as_pyyaml_reads_it(k: str, v: str, shape: str) -> None:
    check(shape.format(k=k, v=v))


@st.composite
def _mutated_flow(draw: Any) -> str:
    """A line holding a flow collection, with pieces inserted or deleted anywhere in it."""
    line = draw(st.sampled_from(["a: ", "- ", "- a: ", "a:\n  b: "])) + draw(_flow_collection(3))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.integers(0, len(line)))
        if draw(st.booleans()):
            line = line[:where] + draw(st.sampled_from(_INSERTS)) + line[where:]
        else:
            line = line[:where] + line[where + draw(st.integers(1, 3)) :]
    return line + draw(st.sampled_from(["\n", "", " # c\n"]))


@settings(max_examples=400, deadline=None)
@given(_mutated_flow())
def test_mutated_flow_collections_read_as_pyyaml_reads_them(text: str) -> None:
    check(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a: ", "- ", "  - ", "  b: "]), min_size=1, max_size=5), st.data())
def test_flow_collections_in_block_documents_read_the_same(heads: list[str], data: Any) -> None:
    lines = [head + data.draw(_flow_collection(3)) for head in heads]
    check("\n".join(lines) + "\n")


_WORDS = st.one_of(
    st.sampled_from(["gpu", "A100", "x y", "yes", "~", "1", "-2.5", "2026-11-30", "it's", ""]),
    st.text(st.sampled_from("abz019 -_.é"), max_size=6),
)
_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.dates(), _WORDS)
_FLOW_DATA = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_WORDS | st.integers(0, 9), inner, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_FLOW_DATA, min_size=1, max_size=4), st.booleans(), st.data())
def test_flow_style_dumps_read_the_same(items: Any, sort_keys: bool, draw: Any) -> None:
    """Leaf collections as PyYAML writes them with ``default_flow_style=None``: one line
    each (several lines when wider than ``width``, then declined)."""
    width = draw.draw(st.sampled_from([80, 10_000]))
    data = {"items": items, "first": copy.deepcopy(items[0])}
    unicode = draw.draw(st.booleans())
    text = yaml.safe_dump(
        data, default_flow_style=None, sort_keys=sort_keys, width=width, allow_unicode=unicode
    )
    check(text)
    check(text.replace("\n", "\r\n"))
