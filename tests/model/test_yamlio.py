"""The fast YAML loader gives what ``yaml.safe_load`` gives, for every kind of document."""

from __future__ import annotations

import datetime
import gc
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.model import yamlio
from hetsched.model.yamlio import YAMLError, gc_paused, safe_load

DOCUMENTS = [
    "nodes:\n  - {name: a, cpu: '8', memory: 16Gi}\n  - name: b\n    cpu: 4\n",
    "a: 1\nb: 1.5\nc: true\nd: null\ne: ~\nf: 0x10\ng: 1e3\nh: .inf\ni: yes\n",
    "when: 2026-11-30\nat: 2026-11-30T10:00:00Z\nbin: !!binary aGVsbG8=\n",
    "base: &b {cpu: 1, memory: 2Gi}\none: *b\ntwo:\n  <<: *b\n  cpu: 4\n",
    "list: &l [1, 2]\nagain: *l\n",
    "1: one\n2.5: two\ntrue: three\nnull: four\n",
    "forced: !!str 123\nint: !!int '7'\nset: !!set {a, b}\n",
    "- a\n- [b, c]\n- {d: [e, {f: g}]}\n",
    "plain\n",
    "",
    "key: |\n  two\n  lines\nfolded: >\n  one\n  line\n",
    "'quoted key': \"with \\u00e9scape\"\nempty: ''\n",
]


@pytest.mark.parametrize("text", DOCUMENTS)
def test_the_same_values_as_pyyaml(text: str) -> None:
    assert safe_load(text) == yaml.safe_load(text)
    assert safe_load(text.encode()) == yaml.safe_load(text)


def test_aliases_are_the_same_object_and_recursion_is_kept() -> None:
    doc = safe_load("list: &l [1, 2]\nagain: *l\n")
    assert doc["list"] is doc["again"]
    loop = safe_load("&a [1, *a]")
    assert loop[1] is loop


def test_merge_keys_and_timestamps_keep_their_types() -> None:
    doc = safe_load(DOCUMENTS[3] + "when: 2026-11-30\n")
    assert doc["two"] == {"cpu": 4, "memory": "2Gi"}
    assert doc["when"] == datetime.date(2026, 11, 30)


@pytest.mark.parametrize("text", ["a: [1, 2", "a: b: c", "- a\nb: c", "\t- tab"])
def test_malformed_yaml_raises_yaml_error(text: str) -> None:
    with pytest.raises(YAMLError):
        safe_load(text)


def test_a_document_nested_too_deeply_is_a_yaml_error() -> None:
    with pytest.raises(YAMLError):
        safe_load("[" * 100_000 + "]" * 100_000)


def test_the_c_loader_is_used_where_pyyaml_has_libyaml() -> None:
    assert hasattr(yaml, "CSafeLoader") == yamlio.C_LOADER
    if yamlio.C_LOADER:
        assert issubclass(yamlio._Loader, yaml.CSafeLoader)


def test_the_garbage_collector_is_restored() -> None:
    assert gc.isenabled()
    safe_load("a: 1\n")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    # libyaml and the pure-Python reader differ on a few control characters (NEL)
    st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=20),
)
_DATA = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(
            st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=8), inner, max_size=5
        ),
    ),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(_DATA, st.sampled_from(["block", "flow"]))
def test_round_trips_like_pyyaml(data: Any, style: str) -> None:
    text = yaml.safe_dump(data, default_flow_style=style == "flow", allow_unicode=True)
    assert safe_load(text) == yaml.safe_load(text) == data


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60))
def test_any_text_loads_as_pyyaml_s_loader_of_the_same_kind_loads_it(text: str) -> None:
    base = yaml.CSafeLoader if yamlio.C_LOADER else yaml.SafeLoader
    try:
        expected = yaml.load(text, Loader=base)
    except yaml.YAMLError:
        with pytest.raises(YAMLError):
            safe_load(text)
        return
    assert safe_load(text) == expected


def test_a_loader_with_path_resolvers_still_resolves_by_path() -> None:
    class Tagged(yamlio._Loader):
        pass

    Tagged.add_constructor("!port", lambda loader, node: int(loader.construct_scalar(node)))
    Tagged.add_path_resolver("!port", ["server", "port"], yaml.ScalarNode)
    doc = yaml.load("server: {port: '8080', name: '9'}\n", Loader=Tagged)
    assert doc == {"server": {"port": 8080, "name": "9"}}
    plain = safe_load("server: {port: '8080', name: '9'}\n")
    assert plain == {"server": {"port": "8080", "name": "9"}}


def test_a_value_replaced_by_a_duplicate_key_is_still_built_as_pyyaml_builds_it() -> None:
    text = "a: {[1]: 2}\na: 1\n"  # the first value has an unhashable key
    with pytest.raises(yaml.constructor.ConstructorError):
        yaml.load(text, Loader=yaml.CSafeLoader if yamlio.C_LOADER else yaml.SafeLoader)
    with pytest.raises(yaml.constructor.ConstructorError):
        safe_load(text)
    assert safe_load("a: {b: 2}\nc: 3\na: 1\n") == {"a": 1, "c": 3}


@pytest.mark.parametrize(
    "text",
    [
        "? 0:\n  ? 0: 1\n",  # a mapping as a key: PyYAML finds it unhashable before building it
        "a: [1, 2001-02-30]\nb: !foo x\n",  # two errors: PyYAML's order decides which is raised
    ],
)
def test_construction_errors_are_pyyaml_s_own(text: str) -> None:
    base = yaml.CSafeLoader if yamlio.C_LOADER else yaml.SafeLoader
    with pytest.raises(Exception) as expected:
        yaml.load(text, Loader=base)
    with pytest.raises(type(expected.value)) as error:
        safe_load(text)
    assert str(error.value) == str(expected.value)
