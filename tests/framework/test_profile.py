from pathlib import Path

import pytest

from hetsched.framework import (
    ProfileError,
    ProfileSpec,
    installed,
    load_profile,
    parse_profile,
    register,
)


def test_defaults() -> None:
    spec = parse_profile({})
    assert spec.queue_sort.name == "fifo"
    assert [r.name for r in spec.filter] == ["fit", "node-selector", "taints"]
    # stranding joined bestfit: CPU-only work off accelerator nodes, accelerators kept fed
    assert [r.name for r in spec.score] == ["bestfit", "stranding"]


def test_example_profile_loads(examples: Path) -> None:
    spec = load_profile(examples / "profiles" / "default.yaml")
    assert spec.score[0].args == {"weights": {"cpu": 1, "memory": 1, "devices": 1}}


@pytest.mark.parametrize(
    ("document", "error"),
    [
        ({"score": ["nope"]}, "score[0].name: unknown plugin 'nope'"),
        ({"filter": ["bestfit"]}, "filter[0].name: plugin 'bestfit' has no filter point"),
        (
            {"score": [{"name": "bestfit", "args": {"weights": {"cpu": -1}}}]},
            "score[0].args.weights.cpu: Input should be greater than or equal to 0",
        ),
        (
            {"score": [{"name": "dotprod", "args": {"prefer": "sideways"}}]},
            "score[0].args.prefer: Input should be 'max' or 'min'",
        ),
        ({"score": [{"name": "firstfit", "args": {"x": 1}}]}, "takes no arguments"),
        ({"score": [{"name": "bestfit", "weight": -2}]}, "score.0.weight"),
        ({"device_choice": "random"}, "device_choice: Input should be"),
        ({"plugins": {}}, "plugins: Extra inputs are not permitted"),
    ],
)
def test_bad_profiles_fail_at_load(document: dict[str, object], error: str) -> None:
    with pytest.raises(ProfileError) as caught:
        parse_profile(document)
    assert error.replace("score.0", "score[0]") in str(caught.value) or error in str(caught.value)


def test_all_errors_reported_together() -> None:
    with pytest.raises(ProfileError) as caught:
        parse_profile({"score": ["nope", {"name": "bestfit", "args": {"bogus": 1}}]})
    assert len(str(caught.value).splitlines()) == 2


def test_registering_a_name_twice_fails() -> None:
    assert "fit" in installed()  # the built-ins, through the package's entry points

    @register("fit")
    class Again:
        pass

    with pytest.raises(ValueError, match="registered twice"):
        installed().with_plugins(Again)


def test_points_are_discovered_from_methods() -> None:
    plugins = installed()
    assert plugins.lookup("fit").points == {"prefilter", "filter"}
    assert plugins.lookup("bestfit").points == {"score"}
    assert plugins.lookup("fifo").points == {"queue_sort"}
    assert isinstance(ProfileSpec().queue_sort.name, str)
