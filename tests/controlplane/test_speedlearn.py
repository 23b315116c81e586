"""The speed learner (controlplane/speedlearn.py): literal cases and properties; progress files
(agent/progress.py); the store's estimates."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsched.agent.checkpoints import CheckpointDirs
from hetsched.agent.progress import ProgressWatcher, parse_progress
from hetsched.controlplane.speedlearn import Estimate, SpeedLearner
from hetsched.controlplane.storage.store import Store
from hetsched.model.speed import SpeedTable


def _feed(learner: SpeedLearner, reports: list[tuple[int, float]], **kw: object) -> None:
    args = {"job_id": "j", "run": 1, "job_type": "t", "model": "A100", "devices": 1}
    args.update(kw)
    for steps, at in reports:
        learner.observe(steps=steps, at=at, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reports", "devices", "expected", "samples"),
    [
        # the first report only starts the clock: 100 steps of start-up are not a rate
        ([(100, 10.0), (140, 11.0)], 1, 40.0, 1),
        ([(0, 0.0)], 1, None, 0),
        # two intervals: 40 then 20 steps/s; the mean moves 0.3 of the way
        ([(0, 0.0), (40, 1.0), (60, 2.0)], 1, 40 * 0.7 + 20 * 0.3, 2),
        # reports closer than min_interval_s wait for a later one
        ([(0, 0.0), (4, 0.1), (40, 1.0)], 1, 40.0, 1),
        # steps went down (a new counter): a new baseline, no negative rate
        ([(0, 0.0), (40, 1.0), (5, 2.0), (25, 3.0)], 1, 40 * 0.7 + 20 * 0.3, 2),
        # a 4-device job: the estimate is per device
        ([(0, 0.0), (160, 1.0)], 4, 40.0, 1),
    ],
)
def test_estimates_literal(
    reports: list[tuple[int, float]], devices: int, expected: float | None, samples: int
) -> None:
    learner = SpeedLearner()
    _feed(learner, reports, devices=devices)
    found = learner.estimates("t")
    if expected is None:
        assert found == []
        return
    assert found[0].rate == pytest.approx(expected)
    assert found[0].samples == samples


def test_runs_are_separate_and_untyped_jobs_teach_nothing() -> None:
    learner = SpeedLearner()
    _feed(learner, [(0, 0.0), (40, 1.0)], run=1)
    _feed(learner, [(0, 0.5), (10, 1.5)], run=2, model="T4")
    _feed(learner, [(0, 0.0), (99, 1.0)], job_id="k", job_type=None)
    assert {(e.model, e.rate) for e in learner.estimates()} == {("A100", 40.0), ("T4", 10.0)}
    measured = learner.measured("k", 1)
    assert measured is not None and measured.rate == 99.0  # measured, but not learned
    learner.forget("k")
    assert learner.measured("k", 1) is None


def test_the_profile_table_wins_and_learned_types_join_it() -> None:
    base = SpeedTable.of({"listed": {"A100": 4.0, "T4": 1.0}})
    learner = SpeedLearner(base)
    assert learner.table() is base
    _feed(learner, [(0, 0.0), (10, 1.0)], job_type="listed", model="T4")
    _feed(learner, [(0, 0.0), (30, 1.0)], job_type="new", model="A100", job_id="k")
    table = learner.table()
    assert table is not None
    assert dict(table.rates("listed") or {}) == {"a100": 4.0, "t4": 1.0}
    assert dict(table.rates("new") or {}) == {"a100": 30.0}
    assert learner.source("listed") == "profile" and learner.source("new") == "learned"
    assert learner.source("other") == "none"
    assert SpeedLearner().table() is None  # nothing known: every model stays equal


@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.floats(0.6, 100.0, allow_nan=False)),
        min_size=2,
        max_size=20,
    )
)
def test_estimate_stays_within_the_measured_rates(intervals: list[tuple[int, float]]) -> None:
    """Whatever the reports, the estimate is a weighted mean of the rates measured between
    them: never outside their range, never negative."""
    learner = SpeedLearner()
    steps, at = 0, 0.0
    rates = []
    learner.observe("j", 1, "t", "A100", 1, steps, at)
    for done, seconds in intervals:
        steps, at = steps + done, at + seconds
        rates.append(done / seconds)
        learner.observe("j", 1, "t", "A100", 1, steps, at)
    (estimate,) = learner.estimates()
    assert estimate.samples == len(intervals)
    assert min(rates) - 1e-9 <= estimate.rate <= max(rates) + 1e-9


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"steps": 5}, None),
        ({"steps": -1}, "steps: expected a whole number >= 0"),
        ({"steps": True}, "steps: expected a whole number >= 0"),
        ({"steps": 1.5}, "steps: expected a whole number >= 0"),
        ({"step": 5}, "unknown field 'step'"),
        ([5], "expected"),
    ],
)
def test_parse_progress(body: object, message: str | None) -> None:
    if message is None:
        assert parse_progress(body) == 5
        return
    with pytest.raises(ValueError, match=message):
        parse_progress(body)


def test_progress_files_are_new_reports_only_once(tmp_path: Path) -> None:
    dirs = CheckpointDirs(tmp_path)
    folder = dirs.prepare("j")
    (folder / "PROGRESS").write_text(json.dumps({"steps": 7}))  # an earlier run's
    watcher = ProgressWatcher(dirs)
    watcher.watch("j")
    assert watcher.poll() == []
    (folder / ".tmp").write_text(json.dumps({"steps": 9}))
    os.replace(folder / ".tmp", folder / "PROGRESS")
    ((job, report),) = watcher.poll()
    assert job == "j" and report.steps == 9 and report.at > 0
    assert watcher.poll() == []
    (folder / "PROGRESS").write_text("not json")
    assert watcher.poll() == []
    os.unlink(folder / "PROGRESS")
    os.symlink(tmp_path / "elsewhere", folder / "PROGRESS")
    assert watcher.poll() == []  # links are not followed


def test_the_store_keeps_estimates(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    store.migrate()
    first = Estimate("t", "A100", 40.0, 1, 10.0)
    store.save_speed_estimates([first, Estimate("t", "T4", 10.0, 2, 11.0)])
    store.save_speed_estimates([Estimate("t", "A100", 38.0, 2, 12.0)])
    assert store.speed_estimates() == [
        Estimate("t", "A100", 38.0, 2, 12.0),
        Estimate("t", "T4", 10.0, 2, 11.0),
    ]
    store.close()
