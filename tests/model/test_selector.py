import pytest

from hetsched.model.selector import SelectorError, attr_key, compile_selector, matches

A100 = attr_key({"model": "A100", "memory_gib": 80, "class": "gpu", "nvlink": True})
T4 = attr_key({"model": "T4", "memory_gib": 16, "class": "gpu"})


@pytest.mark.parametrize(
    ("expression", "a100", "t4"),
    [
        ('device.attributes["model"] in ["A100", "H100"]', True, False),
        ('device.attributes["memory_gib"] >= 40', True, False),
        ('device.attributes["model"] == "T4" || device.attributes["memory_gib"] > 60', True, True),
        ('device.attributes["nvlink"]', True, False),  # missing attribute: no match
        ('device.attributes["memory_gib"] + 1', False, False),  # not a boolean: no match
        ("true", True, True),
    ],
)
def test_matches(expression: str, a100: bool, t4: bool) -> None:
    assert matches(expression, A100) is a100
    assert matches(expression, T4) is t4


@pytest.mark.parametrize("bad", ['device.attributes["model"] in [', "1 +", "&&"])
def test_invalid_selectors_name_the_expression(bad: str) -> None:
    with pytest.raises(SelectorError, match="invalid selector"):
        compile_selector(bad)


def test_attr_key_is_order_independent() -> None:
    assert attr_key({"a": 1, "b": "x"}) == attr_key({"b": "x", "a": 1})
