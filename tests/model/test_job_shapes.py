"""Job files with elastic and heterogeneous jobs: what they build, and the errors that name
the field and what was expected."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from builders import EXAMPLES
from hetsched.cli.jobfile import validate_job_file
from hetsched.controlplane.schemas import SubmitSpec, from_stored
from hetsched.model.job import ResizeMode
from hetsched.model.specs import SpecError, parse_jobs

GPU = {"devices": [{"class": "gpu", "count": 1}]}


def test_an_elastic_job_and_a_job_with_groups_build() -> None:
    elastic, hetero = parse_jobs(
        {
            "jobs": [
                {"name": "e", "replicas": 8, "min_replicas": 2, "resize": "live", "resources": GPU},
                {
                    "name": "h",
                    "groups": [
                        {"name": "driver", "resources": {"cpu": "8"}},
                        {"name": "workers", "replicas": 4, "resources": GPU},
                    ],
                },
            ]
        }
    )
    assert (elastic.elastic, elastic.gang_min, elastic.resize) == (True, 2, ResizeMode.LIVE)
    assert hetero.replicas == 5 and [g.name for g in hetero.groups] == ["driver", "workers"]
    assert hetero.request_of(0).cpu_milli == 8000 and hetero.request_of(4).devices
    assert hetero.group_of(3) == (hetero.groups[1], 2)
    assert hetero.gang_min == 5 and not hetero.elastic


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ({"replicas": 2, "min_replicas": 3}, "min_replicas must be 1..replicas (2), got 3"),
        ({"replicas": 4, "min_replicas": 2, "gang": 2}, "min_replicas and gang: set one"),
        ({"min_replicas": 0}, "min_replicas: Input should be greater than or equal to 1"),
        ({"replicas": 2, "min_replicas": 1, "resize": "fast"}, "resize: Input should be"),
        ({"replicas": 2, "resize": "live"}, "resize: only an elastic job is resized; set min_"),
        (
            {"min_replicas": 2, "groups": [{"name": "w", "replicas": 4, "resources": GPU}]},
            "min_replicas: a job with groups sets replicas and resources per group",
        ),
        ({"groups": []}, "groups: List should have at least 1 item"),
        (
            {"groups": [{"name": "a", "resources": GPU}, {"name": "a", "resources": GPU}]},
            "groups: each name once, got a more than once",
        ),
        (
            {"replicas": 3, "groups": [{"name": "a", "resources": GPU}]},
            "replicas: a job with groups sets replicas and resources per group",
        ),
        (
            {"resources": GPU, "groups": [{"name": "a", "resources": GPU}]},
            "resources: a job with groups sets replicas and resources per group",
        ),
        (
            {"groups": [{"name": "-x", "resources": GPU}]},
            "jobs[0].groups[0].name: String should match",
        ),
    ],
)
def test_bad_shapes_name_the_field(job: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_jobs({"jobs": [{"name": "j", **job}]})
    assert message in str(caught.value), str(caught.value)


def test_the_example_file_builds_an_elastic_job_and_a_driver_with_its_workers() -> None:
    # as `hetsched check` and `hetsched submit` read it (the API's rules)
    path = EXAMPLES / "jobs" / "shapes.yaml"
    elastic, hetero = validate_job_file(yaml.safe_load(path.read_text()), str(path)).build()
    assert (elastic.replicas, elastic.gang_min, elastic.resize) == (8, 2, ResizeMode.CHECKPOINT)
    assert hetero.replicas == 9 and hetero.gang_min == 9
    assert hetero.group_of(0) == (hetero.groups[0], 0) and hetero.groups[0].name == "driver"
    assert hetero.request_of(0).cpu_milli == 8000 and not hetero.request_of(0).devices
    assert hetero.group_of(8) == (hetero.groups[1], 7)
    assert hetero.request_of(8).cpu_milli == 2000 and len(hetero.request_of(8).devices) == 1


def test_a_stored_rigid_job_with_resize_still_loads() -> None:
    # accepted before resize required min_replicas: recovery reads the stored body as it is
    body = {"name": "old", "command": ["true"], "resources": {"cpu": "1"}, "resize": "live"}
    assert from_stored(body).min_replicas is None
    with pytest.raises(ValidationError, match="resize: only an elastic job is resized"):
        SubmitSpec.model_validate(body)
