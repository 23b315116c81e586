"""How jobs and errors read in the CLI: resources without Python reprs, plurals, error lines."""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.cli.client import error_line
from hetsched.cli.job_text import plural, resources_text


@pytest.mark.parametrize(
    ("resources", "text"),
    [
        ({"cpu": "1", "memory": "1Gi"}, "cpu 1, mem 1Gi"),
        (
            {
                "cpu": "2",
                "memory": "4Gi",
                "devices": [{"class": "gpu", "count": 1, "model": ["A100"]}],
            },
            "cpu 2, mem 4Gi, 1 gpu A100",
        ),
        (
            {"devices": [{"class": "gpu", "count": 2, "model": ["A100", "H100"]}]},
            "cpu 0, mem 0, 2 gpu A100|H100",
        ),
        (
            {"devices": [{"class": "gpu", "count": 1, "share": 300, "model": "T4"}]},
            "cpu 0, mem 0, 300/1000 gpu T4",
        ),
        ({"devices": [{"class": "fpga", "count": 1}]}, "cpu 0, mem 0, 1 fpga"),
    ],
)
def test_resources_read_without_reprs(resources: dict[str, Any], text: str) -> None:
    assert resources_text(resources) == text
    assert "[" not in resources_text(resources) and "{" not in resources_text(resources)


@pytest.mark.parametrize(
    ("count", "word", "text"),
    [(0, "node", "0 nodes"), (1, "node", "1 node"), (2, "node", "2 nodes"), (1, "job", "1 job")],
)
def test_plural(count: int, word: str, text: str) -> None:
    assert plural(count, word) == text


@pytest.mark.parametrize(
    ("error", "line"),
    [
        ("jobs[0].cpu: not a quantity", "jobs[0].cpu: not a quantity"),
        ({"loc": ["body", "resources", "cpu"], "msg": "bad"}, "resources.cpu: bad"),
        ({"loc": [], "msg": "bad"}, "bad"),
        ({"index": 1, "reason": "over quota"}, "index: 1; reason: over quota"),
    ],
)
def test_an_error_is_a_line_not_a_repr(error: object, line: str) -> None:
    assert error_line(error) == line
