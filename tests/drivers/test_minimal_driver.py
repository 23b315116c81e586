"""The minimal driver of docs/concepts.md ("The driver contract") runs as written."""

from __future__ import annotations

import re
from typing import Any

from builders import ROOT, gpu_node, job


def _example() -> dict[str, Any]:
    text = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    section = text.split("## The driver contract", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the driver contract section has no python example"
    code = match.group(1)
    assert len(code.splitlines()) <= 50  # a small adapter, as the docs say
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/concepts.md", "exec"), namespace)
    return namespace


def test_the_example_driver_runs_jobs_one_after_the_other() -> None:
    run = _example()["run"]
    jobs = [job("a", gpus=1, submit_time=0.0), job("b", gpus=1, submit_time=2.0)]
    log = run([gpu_node("n", gpus=1)], jobs, {"a": 10.0, "b": 5.0})
    assert log == [
        "0 a pending: submitted",
        "0 a running: run 1: bound 1 task(s) to n",
        "2 b pending: submitted",
        "10 a succeeded: all tasks succeeded",
        "10 b running: run 1: bound 1 task(s) to n",
        "15 b succeeded: all tasks succeeded",
    ]


def test_the_example_driver_carries_out_a_preemption() -> None:
    from hetsched.cluster.state import ClusterState
    from hetsched.drivers import Interpreter
    from hetsched.framework.profile import parse_profile
    from hetsched.scheduler import JobSubmitted, Scheduler

    namespace = _example()
    clock = namespace["Clock"]({"low": 100.0, "high": 5.0})
    profile = parse_profile({"queue_sort": "priority", "post_filter": ["preemption"]})
    core = Scheduler(ClusterState([gpu_node("n", gpus=1)]), profile)
    interpreter = Interpreter(clock, clock)
    interpreter.carry_out(core.handle([JobSubmitted(job("low", gpus=1))], 0.0), 0.0)
    high = job("high", gpus=1, priority=5)
    interpreter.carry_out(core.handle([JobSubmitted(high)], 1.0), 1.0)
    assert clock.log[-2:] == [
        "1 high pending: submitted",
        "1 low pending: preempted by high (priority); it loses 1s of work",
    ]
    # the victim's task is stopped within its grace (30 s by default), then high starts
    due, exit_ = clock.due[0]
    assert (due, exit_.key.job, exit_.succeeded) == (31.0, "low", False)
