"""The example profiles load, and the core's profile sections validate with field paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builders import EXAMPLES, gpu_node
from hetsched.cluster import ClusterState
from hetsched.framework.profile import ProfileError, ProfileSpec, load_profile, parse_profile
from hetsched.scheduler import Scheduler


@pytest.mark.parametrize("name", ["priority.yaml", "quotas.yaml", "fairshare.yaml"])
def test_example_profiles_load_and_build_a_scheduler(name: str) -> None:
    profile = load_profile(Path(EXAMPLES) / "profiles" / name)
    core = Scheduler(ClusterState([gpu_node("g")]), profile)
    assert core.framework.queue_sort.name == profile.queue_sort.name


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"gang": {"timeout_s": 0}}, "gang.timeout_s"),
        ({"gang": {"colour": 1}}, "gang.colour"),
        ({"backfill": {"default_runtime_s": -1}}, "backfill.default_runtime_s"),
        ({"timeouts": {"max_pending_s": 0}}, "timeouts.max_pending_s"),
        ({"queue_sort": {"name": "fifo", "args": {"mode": "sometimes"}}}, "queue_sort.args.mode"),
        (
            {"queue_sort": {"name": "priority", "args": {"aging_rate": -1}}},
            "queue_sort.args.aging_rate",
        ),
        ({"queue_sort": "lottery"}, "queue_sort.name"),
        (
            {"post_filter": [{"name": "preemption", "args": {"grace_s": -5}}]},
            "post_filter[0].args.grace_s",
        ),
        ({"post_filter": ["drf"]}, "post_filter[0].name"),
        ({"flavors": ["cpu"]}, "flavors[0]"),
    ],
)
def test_bad_sections_name_their_field(data: dict[str, Any], path: str) -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile(data)
    assert path in str(err.value)


def test_scheduler_validates_a_profile_built_in_code() -> None:
    spec = ProfileSpec.model_validate({"queues": [{"name": "a", "parent": "a"}]})
    with pytest.raises(ProfileError, match=r"queues\[0\].parent: cycle"):
        Scheduler(ClusterState(), spec)
