"""Selector cost is bounded: static limits at compile time, a budget of steps at run time."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.k8s.translate import TranslateError, pod_request
from hetsched.model.selector import (
    LIMITS,
    SelectorError,
    SelectorLimits,
    SelectorTooCostly,
    attr_key,
    compile_selector,
    matches,
)
from hetsched.model.specs import SpecError, parse_jobs
from hetsched.sim.workload import COLUMNS, WorkloadError, read_workload

A100 = {"model": "A100", "memory_gib": 80, "numa": 1}
LIST30 = "[" + ",".join(str(i) for i in range(30)) + "]"
#: the reported attack: three nested comprehensions over 30-element lists (~27,000 bodies)
THREE_MAPS = f"{LIST30}.map(a, {LIST30}.map(b, {LIST30}.map(c, a + b + c))).size() > 0"

#: (case, expression, the limit it breaks)
OVER: list[tuple[str, str, str]] = [
    ("three nested maps over 30 elements", THREE_MAPS, "max_comprehension_nesting"),
    (
        "two nested maps over 30 elements",
        f"{LIST30}.map(a, {LIST30}.map(b, a * b)).size() > 0",
        "max_cost",
    ),
    ("comprehension over a long concatenation", f"({LIST30}+{LIST30}).exists(x, x > 1)", ""),
    ("too long", "true || " * 1500 + "true", "max_length"),
    ("too many nodes", "1+" * 1500 + "1 > 0", "max_nodes"),
    ("nested too deeply", "(" * 40 + "true" + ")" * 40, "max_depth"),
    ("list literal too large", "1 in [" + ",".join(["1"] * 600) + "]", "max_literal_items"),
    ("map literal too large", "{" + ",".join(f"{i}: 1" for i in range(600)) + "}[1] == 1", ""),
    ("string literal too long", 'device.attributes["model"] == "' + "x" * 2000 + '"', ""),
    (
        "filter over a concatenation of filters",
        "(" + " + ".join([f"{LIST30}.filter(x, x > 0)"] * 12) + ").all(y, y > 0)",
        "max_cost",
    ),
]
_LIMIT_OF = {
    "comprehension over a long concatenation": None,
    "map literal too large": "max_literal_items",
    "string literal too long": "max_string_length",
}


@pytest.mark.parametrize(("case", "expression", "limit"), OVER, ids=[c[0] for c in OVER])
def test_over_the_limits_is_refused_naming_the_limit(
    case: str, expression: str, limit: str
) -> None:
    expected = limit or _LIMIT_OF[case]
    if expected is None:  # within the limits: a small comprehension is fine
        assert compile_selector(expression).cost <= LIMITS.max_cost
        return
    with pytest.raises(SelectorTooCostly) as caught:
        compile_selector(expression)
    assert caught.value.limit == expected
    assert expected in str(caught.value)
    # the core never fails on such a selector: it matches nothing
    assert matches(expression, attr_key(A100)) is False


ACCEPTED = [
    'device.attributes["model"] in ["A100", "H100"] && device.attributes["memory_gib"] >= 40',
    'device.attributes["model"] in [' + ", ".join(f'"M{i}"' for i in range(300)) + "]",
    'device.attributes["model"].startsWith("A") || device.attributes["model"].matches("^H1")',
    '["A100", "H100"].exists(m, device.attributes["model"] == m)',
    "[1, 2, 3].all(x, [4, 5].exists(y, x < y))",
    'has(device.attributes.numa) ? device.attributes["numa"] == 1 : false',
]


@pytest.mark.parametrize("expression", ACCEPTED)
def test_realistic_selectors_are_within_the_limits(expression: str) -> None:
    selector = compile_selector(expression)
    assert selector.cost <= LIMITS.max_cost
    assert selector.steps(A100) <= selector.cost


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("[1, 2].reduce(r, i, 0, r + i) == 3", r"reduce\(\) is not available"),
        ("[1, 2].map(x) == [1]", "takes a variable name and an expression"),
        ("[1, 2].map(x + 1, x) == [1]", "must be a variable name"),
    ],
)
def test_refused_constructs(expression: str, message: str) -> None:
    with pytest.raises(SelectorError, match=message):
        compile_selector(expression)


def test_the_runtime_budget_stops_an_evaluation_the_estimate_allowed() -> None:
    # a device with far more attributes than the estimate assumes: the budget still holds
    expression = "device.attributes.all(k, [1, 2, 3, 4, 5, 6, 7, 8].all(v, v > 0))"
    loose = SelectorLimits(max_cost=10**9)
    selector = compile_selector(expression, loose)
    many = {f"a{i}": i for i in range(2000)}
    assert selector.evaluate(many, budget=10**9) is True
    assert selector.evaluate(many, budget=selector.cost) is False
    assert selector.steps(many) > selector.cost


def test_a_limit_can_be_tightened() -> None:
    with pytest.raises(SelectorTooCostly, match="max_comprehension_nesting"):
        compile_selector("[1].all(x, x > 0)", SelectorLimits(max_comprehension_nesting=0))


# -- the estimate is an upper bound on the steps taken -----------------------------------------

_VARS = ("x", "y")


def _expressions(depth: int, bound: tuple[str, ...]) -> st.SearchStrategy[str]:
    leaves = [
        st.integers(-3, 50).map(str),
        st.lists(st.integers(0, 9), max_size=12).map(lambda v: "[" + ",".join(map(str, v)) + "]"),
        st.just('device.attributes["memory_gib"]'),
        st.just('device.attributes["model"]'),
        st.just('"A100"'),
    ]
    leaves += [st.just(v) for v in bound]
    if depth == 0:
        return st.one_of(leaves)
    sub = _expressions(depth - 1, bound)
    free = [v for v in _VARS if v not in bound]
    options = [
        *leaves,
        st.tuples(sub, st.sampled_from(["+", "==", "<", "in", "&&", "||", "-"]), sub).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        st.tuples(sub, sub, sub).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
        sub.map(lambda e: f"size({e})"),
    ]
    if free:
        var = free[0]
        body = _expressions(depth - 1, (*bound, var))
        options.append(
            st.tuples(sub, st.sampled_from(["map", "filter", "all", "exists"]), body).map(
                lambda t, v=var: f"{t[0]}.{t[1]}({v}, {t[2]})"
            )
        )
    return st.one_of(options)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_expressions(4, ()))
def test_the_estimate_bounds_the_steps_taken(expression: str) -> None:
    try:
        selector = compile_selector(expression, SelectorLimits(max_cost=10**9))
    except SelectorError:
        return  # refused before running: nothing to bound
    for attributes in (A100, {"model": "T4"}, {}):
        assert selector.steps(attributes) <= selector.cost, expression


# -- the same limits wherever a selector comes in ----------------------------------------------


def test_job_specs_refuse_a_costly_selector_naming_field_and_limit() -> None:
    device = {"class": "gpu", "selector": THREE_MAPS}
    with pytest.raises(SpecError) as caught:
        parse_jobs({"jobs": [{"name": "j", "resources": {"devices": [device]}}]}, "jobs.yaml")
    (error,) = caught.value.errors
    assert error.startswith("jobs[0].resources.devices[0].selector: selector refused")
    assert "max_comprehension_nesting" in error


def test_the_model_shorthand_is_held_to_the_limits_and_cannot_inject() -> None:
    many = {"class": "gpu", "model": [f"M{i}" for i in range(600)]}
    with pytest.raises(SpecError, match="max_literal_items"):
        parse_jobs({"jobs": [{"name": "j", "resources": {"devices": [many]}}]})
    hostile = {"class": "gpu", "model": 'A100"] || true || ["x'}
    (job,) = parse_jobs({"jobs": [{"name": "j", "resources": {"devices": [hostile]}}]})
    selector = job.resources.devices[0].primary.selector
    assert selector is not None
    assert not matches(selector, attr_key({"model": "T4"}))
    assert matches(selector, attr_key({"model": 'A100"] || true || ["x'}))


def test_check_command_refuses_a_costly_selector(tmp_path: Path) -> None:
    doc = {"jobs": [{"name": "j", "resources": {"devices": [{"class": "gpu", "selector": "x"}]}}]}
    doc["jobs"][0]["resources"]["devices"][0]["selector"] = THREE_MAPS  # type: ignore[index]
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["check", str(path), "-o", "json"])
    assert result.exit_code != 0
    assert "max_comprehension_nesting" in result.output


def test_the_simulator_workload_loader_refuses_a_costly_selector(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    selector = THREE_MAPS.replace('"', '""')
    path.write_text(",".join(COLUMNS) + "\n" + f'0,10,,,,,,gpu,1,,"{selector}",\n')
    with pytest.raises(WorkloadError) as caught:
        read_workload(path)
    assert any("selector" in e and "max_comprehension_nesting" in e for e in caught.value.errors)


def test_the_kubernetes_translation_refuses_a_costly_selector() -> None:
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "annotations": {"hetsched.io/selector": THREE_MAPS},
        },
        "spec": {"containers": [{"resources": {"limits": {"hetsched.io/gpu": "1"}}}]},
    }
    with pytest.raises(TranslateError, match="max_comprehension_nesting"):
        pod_request(pod)


def test_a_refused_selector_is_refused_again_with_the_same_error() -> None:
    with pytest.raises(SelectorTooCostly) as first:
        compile_selector(THREE_MAPS)
    with pytest.raises(SelectorTooCostly) as again:
        compile_selector(THREE_MAPS)
    assert str(again.value) == str(first.value) and again.value.limit == first.value.limit
    with pytest.raises(SelectorError, match="invalid selector"):
        compile_selector("1 +")
    with pytest.raises(SelectorError, match="invalid selector"):
        compile_selector("1 +")
