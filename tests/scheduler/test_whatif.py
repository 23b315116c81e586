"""What-if for a job the core does not hold: now, later (when), never."""

from __future__ import annotations

import dataclasses

import pytest

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.scheduler import JobSubmitted, Scheduler


def _busy() -> Scheduler:
    """Two 2-GPU nodes; a 2-GPU job expected to run 100 s holds one of them."""
    core = Scheduler(ClusterState([gpu_node("g0", gpus=2), gpu_node("g1", gpus=2)]))
    running = dataclasses.replace(job("r", gpus=2), estimated_runtime_s=100.0)
    core.handle([JobSubmitted(running)], 0.0)
    return core


@pytest.mark.parametrize(
    ("probe", "fits_now", "start", "words"),
    [
        (job("p", gpus=2), True, 10.0, "fits now"),
        (job("p", gpus=1, replicas=2), True, 10.0, "fits now"),
        # the gang of two 2-GPU tasks needs both nodes: once r ends at t=100
        (job("p", gpus=2, replicas=2), False, 100.0, "once r finish"),
        (job("p", gpus=4), False, None, "never"),
        (job("p", gpus=1, selector='device.attributes["model"] == "H100"'), False, None, "never"),
    ],
)
def test_now_later_never(probe: object, fits_now: bool, start: float | None, words: str) -> None:
    core = _busy()
    core.handle([], 10.0)
    before = dict(core.state.allocations)
    answer = core.view.what_if(probe)  # type: ignore[arg-type]
    assert (answer.fits_now, answer.start) == (fits_now, start)
    assert words in answer.reason
    assert answer.ever is (start is not None)
    # a what-if commits to nothing
    assert core.state.allocations == before and "p" not in core.jobs
    data = answer.to_dict(10.0)
    assert data["fits_now"] is fits_now
    assert data["start_in_s"] == (None if start is None else start - 10.0)


def test_never_names_the_filters_reasons() -> None:
    answer = _busy().view.what_if(job("p", gpus=4))
    assert "never" in answer.reason and "gpu" in answer.reason
