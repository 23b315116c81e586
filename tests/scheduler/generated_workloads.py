"""Generated workloads for the core's property tests: a job from a drawn dict, and the
disturbances (cancellations, device failures and repairs) scheduled into a harness.

The strategies stay in each test (they draw what the property needs); what a drawn job
and a drawn disturbance mean is the same everywhere, so it is said once here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import hypothesis.strategies as st

from builders import job
from harness import Harness
from hetsched.model.device import Health
from hetsched.model.job import Job
from hetsched.scheduler import DeviceHealthChanged, JobCancelled, Scheduler

#: (time, what, which): cancel job ``which``, or take device ``which`` away / give it back
#: (both modulo how many there are)
disturbances = st.lists(
    st.tuples(st.integers(1, 80), st.sampled_from(["cancel", "fail", "heal"]), st.integers(0, 50)),
    max_size=5,
)


def drawn_job(i: int, w: dict[str, Any]) -> Job:
    """Job ``j<i>`` of a drawn dict: ``gpus`` whole GPUs, or with 1 GPU a ``share`` of it,
    on ``model`` (None: any); ``replicas``, ``queue``, ``priority``, ``preemptible``,
    ``duration`` (its estimated runtime) and ``submit``; ``gang`` and ``user`` if drawn."""
    gpus = w["gpus"]
    selector = f'device.attributes["model"] == "{w["model"]}"' if w["model"] else None
    extra = {key: w[key] for key in ("gang", "user") if key in w}
    return job(
        f"j{i:02d}",
        gpus=gpus,
        share=w["share"] if gpus == 1 else 1000,
        selector=selector if gpus else None,
        replicas=w["replicas"],
        queue=w["queue"],
        priority=w["priority"],
        preemptible=w["preemptible"],
        estimated_runtime_s=float(w["duration"]),
        submit_time=float(w["submit"]),
        **extra,
    )


def disturb(h: Harness, core: Scheduler, jobs: Sequence[Job], events: list[Any]) -> None:
    """Schedule the drawn disturbances into ``h``."""
    devices = [d.id for n in core.state.nodes for d in n.devices]
    for time, what, which in events:
        if what == "cancel":
            h.at(float(time), JobCancelled(jobs[which % len(jobs)].id))
        else:
            health = Health.UNHEALTHY if what == "fail" else Health.HEALTHY
            h.at(float(time), DeviceHealthChanged(devices[which % len(devices)], health))
