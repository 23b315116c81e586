"""Stepping a PodScheduler in tests until a condition holds."""

from __future__ import annotations

from collections.abc import Callable

from hetsched.k8s.scheduler import PodScheduler


def wait(sched: PodScheduler, done: Callable[[], bool], steps: int = 150) -> None:
    """Step the scheduler until ``done`` (at most ``steps`` steps of up to 0.1 s)."""
    for _ in range(steps):
        if done():
            return
        sched.step(0.1)
    assert done(), "condition not reached"
