"""Dependencies in the simulator: workload rows name the jobs they wait for (hand-computed
timelines), and bad references or cycles are refused with their line."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import gpu_node
from hetsched.sim.engine import EngineConfig, JobOutcome, SimResult, Simulator
from hetsched.sim.workload import COLUMNS, WorkloadError, read_workload

HEADER = "id," + ",".join(COLUMNS) + ",after,on_unmet"


def _csv(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "w.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return path


def _row(job: str, submit: float, duration: float, after: str = "", keep: bool = False) -> str:
    # id, submit_time, duration, user, queue, priority, cpu, memory, class, count, share,
    # selector, gang, after, on_unmet
    return f"{job},{submit},{duration},,,,1,1Gi,gpu,1,,,1,{after},{'keep' if keep else ''}"


def by_id(result: SimResult) -> dict[str, JobOutcome]:
    return {j.job_id: j for j in result.jobs}


@pytest.mark.parametrize("keep_ended", [True, False])
def test_a_diamond_runs_in_dependency_order(tmp_path: Path, keep_ended: bool) -> None:
    path = _csv(
        tmp_path,
        _row("d", 0, 5, "b;c"),
        _row("b", 0, 20, "a"),
        _row("c", 0, 30, "a"),
        _row("a", 0, 10),
        _row("e", 50, 1, "a:ended"),  # a ended long before e arrives
    )
    workload = read_workload(path)
    assert workload.jobs[0].job.after[1].job == "c"
    config = EngineConfig(keep_ended_jobs=keep_ended)
    jobs = by_id(Simulator([gpu_node("n", gpus=4)], workload, config=config).run())
    timeline = {j: (jobs[j].first_start, jobs[j].end, jobs[j].state) for j in "abcde"}
    assert timeline == {
        "a": (0, 10, "succeeded"),
        "b": (10, 30, "succeeded"),
        "c": (10, 40, "succeeded"),
        "d": (40, 45, "succeeded"),
        "e": (50, 51, "succeeded"),
    }


def test_a_cancelled_job_cancels_its_dependents_unless_they_keep(tmp_path: Path) -> None:
    path = _csv(
        tmp_path,
        _row("a", 0, 100),
        _row("b", 0, 10, "a"),
        _row("c", 0, 10, "b"),
        _row("k", 0, 10, "a", keep=True),
        _row("f", 0, 10, "a:failed"),
    )
    sim = Simulator([gpu_node("n", gpus=4)], read_workload(path), cancellations=[(5, "a")])
    jobs = by_id(sim.run())
    assert {j: (o.state, o.reason) for j, o in jobs.items()} == {
        "a": ("cancelled", "cancelled by the workload"),
        "b": ("cancelled", "a cancelled"),
        "c": ("cancelled", "b cancelled"),
        "f": ("cancelled", "a cancelled"),
        "k": ("pending", "can never start: a cancelled (on_unmet: keep; cancel it to end it)"),
    }


def test_unknown_ids_and_cycles_are_refused_with_their_line(tmp_path: Path) -> None:
    path = _csv(tmp_path, _row("a", 0, 1, "zz"), _row("b", 0, 1, "a:done"))
    with pytest.raises(WorkloadError) as info:
        read_workload(path)
    assert info.value.errors == [
        f"{path}:3: after: 'a:done': the end is succeeded, failed or ended",
    ]
    path = _csv(tmp_path, _row("a", 0, 1, "zz"))
    with pytest.raises(WorkloadError) as info:
        read_workload(path)
    assert info.value.errors == [f"{path}:2: after: no job 'zz' in the workload"]
    path = _csv(tmp_path, _row("a", 0, 1, "c"), _row("b", 0, 1, "a"), _row("c", 0, 1, "b"))
    with pytest.raises(WorkloadError) as info:
        read_workload(path)
    assert info.value.errors == [f"{path}: after: dependency cycle: a -> c -> b -> a"]
