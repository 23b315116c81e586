"""The core's estimate of a round job's work done: rate x running time, kept up to the last
checkpoint; a checkpoint that reports its work replaces the estimate."""

from __future__ import annotations

import pytest

from builders import job
from hetsched.model.checkpoint import Checkpointing, SavedCheckpoint
from hetsched.model.lifecycle import JobState
from hetsched.scheduler.records import JobRecord
from hetsched.scheduler.round_progress import ProgressBook


def _record() -> JobRecord:
    record = JobRecord(job("j", gpus=1, checkpoint=Checkpointing(interval_s=100)), 0)
    record.state = JobState.RUNNING
    return record


def _run(record: JobRecord, run: int, started: float) -> None:
    record.state, record.run, record.started = JobState.RUNNING, run, started


def _stop(record: JobRecord, checkpoint: SavedCheckpoint | None) -> None:
    record.state, record.started, record.checkpoint = JobState.PENDING, None, checkpoint


def test_a_running_job_is_credited_its_rate_times_its_running_time() -> None:
    book, record = ProgressBook(), _record()
    _run(record, 1, 100.0)
    assert book.done(record, 2.0, 100.0) == 0.0
    assert book.done(record, 2.0, 400.0) == 600.0


def test_a_stopped_job_keeps_what_its_checkpoint_saved() -> None:
    book, record = ProgressBook(), _record()
    _run(record, 1, 0.0)
    book.done(record, 2.0, 0.0)
    _stop(record, SavedCheckpoint(300.0, 1))  # saved at 300: 600 of work
    assert book.done(record, 0.0, 500.0) == 600.0
    _run(record, 2, 500.0)  # resumes on a model where it runs at 1
    assert book.done(record, 1.0, 600.0) == 700.0


def test_work_since_the_last_checkpoint_is_lost() -> None:
    book, record = ProgressBook(), _record()
    _run(record, 1, 0.0)
    book.done(record, 1.0, 0.0)
    record.checkpoint = SavedCheckpoint(100.0, 1)
    assert book.done(record, 1.0, 250.0) == 250.0
    _stop(record, record.checkpoint)  # stopped at 250 without a new checkpoint
    assert book.done(record, 1.0, 300.0) == 100.0


def test_a_checkpoint_that_reports_its_work_replaces_the_estimate() -> None:
    book, record = ProgressBook(), _record()
    _run(record, 1, 0.0)
    book.done(record, 1.0, 0.0)
    record.checkpoint = SavedCheckpoint(100.0, 1, progress=40.0)  # slower than assumed
    assert book.done(record, 1.0, 200.0) == pytest.approx(140.0)


def test_a_job_that_starts_again_from_scratch_has_done_nothing() -> None:
    book, record = ProgressBook(), _record()
    _run(record, 1, 0.0)
    book.done(record, 1.0, 0.0)
    _stop(record, None)
    assert book.done(record, 1.0, 100.0) == 0.0
    _run(record, 2, 100.0)
    assert book.done(record, 1.0, 150.0) == 50.0
