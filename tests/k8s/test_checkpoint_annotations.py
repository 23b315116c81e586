"""The checkpoint protocol's annotations (hetsched.k8s.checkpoints): the declaration a pod
carries, the report it writes, and what its replacement is told. Pure functions."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsched.k8s.checkpoints import (
    declaration,
    format_time,
    parse_time,
    report,
    report_value,
    resume_annotations,
)
from hetsched.k8s.names import CHECKPOINT, CHECKPOINT_DIR, RESUME_FROM, RESUME_STEP
from hetsched.k8s.translate import TranslateError, group_job, pod_job
from hetsched.model.checkpoint import Checkpointing, SavedCheckpoint


def pod(value: str | None) -> dict[str, Any]:
    annotations = {} if value is None else {CHECKPOINT: value}
    return {
        "metadata": {"name": "train", "namespace": "ml", "annotations": annotations},
        "spec": {"containers": [{"name": "main"}]},
    }


@pytest.mark.parametrize(
    ("value", "checkpointing", "directory"),
    [
        ("{}", Checkpointing(), ""),
        ("", Checkpointing(), ""),
        ('{"notice_s": 20}', Checkpointing(notice_s=20), ""),
        ("{notice: 2m, interval: 10m, dir: /ckpt}", Checkpointing(600, 120), "/ckpt"),
        ('{"interval_s": 0, "signal": "usr2"}', Checkpointing(0, signal="SIGUSR2"), ""),
        ("{cost_s: 5s, notice_s: 0}", Checkpointing(notice_s=0, cost_s=5), ""),
    ],
)
def test_a_declaration_reads_as_the_job_file_section(
    value: str, checkpointing: Checkpointing, directory: str
) -> None:
    declared = declaration(pod(value))
    assert declared is not None
    assert (declared.checkpointing, declared.directory) == (checkpointing, directory)
    assert pod_job(pod(value)).checkpoint == checkpointing


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{signal: SIGKILL}", "signal: SIGKILL cannot be caught"),
        ("{notice_s: 2h}", "notice_s: at most 3600s"),
        ("{notice_s: soon}", "notice_s:"),
        ("{interval_s: -1}", "interval_s"),
        ("{retries: 3}", "retries: Extra inputs are not permitted"),
        ("[1, 2]", "must be an object"),
        ("{notice_s: [", "not a JSON or YAML object"),
        ("{dir: [a]}", "dir must be a path"),
    ],
)
def test_a_bad_declaration_names_the_annotation_and_the_field(value: str, message: str) -> None:
    with pytest.raises(TranslateError) as caught:
        pod_job(pod(value))
    assert f"pod ml/train: annotation {CHECKPOINT}: " in str(caught.value)
    assert message in str(caught.value)


def test_a_pod_without_the_annotation_does_not_checkpoint() -> None:
    assert declaration(pod(None)) is None
    assert pod_job(pod(None)).checkpoint is None


def test_a_group_takes_its_first_pods_declaration() -> None:
    job = group_job("ml/g", [pod("{notice_s: 45}"), pod("{notice_s: 45}")], 2)
    assert job.checkpoint == Checkpointing(notice_s=45)


@pytest.mark.parametrize(
    ("raw", "step", "path", "time"),
    [
        ('{"step": 7, "path": "/ckpt/7"}', 7, "/ckpt/7", None),
        ('{"step": 7.0}', 7, "", None),
        ("{}", None, "", None),
        ('{"step": 0, "time": "2026-11-30T21:00:00Z"}', 0, "", 1796072400.0),
    ],
)
def test_a_report_reads(raw: str, step: int | None, path: str, time: float | None) -> None:
    saved = report(raw)
    assert (saved.step, saved.path, saved.time) == (step, path, time)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("step 7", "not JSON"),
        ("[7]", "must be a JSON object"),
        ('{"step": -1}', "step must be a whole number"),
        ('{"step": 1.5}', "step must be a whole number"),
        ('{"step": true}', "step must be a whole number"),
        ('{"path": 7}', "path must be a string"),
        ('{"time": "yesterday"}', "RFC 3339"),
        ('{"time": "2026-11-30T21:00:00"}', "with a zone"),
        ('{"path": "' + "x" * 20000 + '"}', "longer than"),
    ],
)
def test_a_bad_report_says_why(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        report(raw)


@given(
    st.integers(min_value=0, max_value=2**40),
    st.text(max_size=40),
    st.integers(min_value=0, max_value=4_000_000_000_000),
)
def test_what_the_cli_writes_reads_back(step: int, path: str, millis: int) -> None:
    saved = report(report_value(step, path, millis / 1000))
    assert (saved.step, saved.path, saved.time) == (step, path, millis / 1000)
    assert parse_time(format_time(millis // 1000)) == millis // 1000


@pytest.mark.parametrize(
    ("value", "resume", "expected"),
    [
        (None, SavedCheckpoint(5.0, 1, 3, "/x"), {}),
        ("{dir: /ckpt}", None, {CHECKPOINT_DIR: "/ckpt"}),
        ("{}", None, {}),
        (
            "{dir: /ckpt}",
            SavedCheckpoint(5.0, 1, 30, "/ckpt/30.npz"),
            {CHECKPOINT_DIR: "/ckpt", RESUME_FROM: "/ckpt/30.npz", RESUME_STEP: "30"},
        ),
        (
            "{dir: /ckpt}",
            SavedCheckpoint(5.0, 1),
            {CHECKPOINT_DIR: "/ckpt", RESUME_FROM: "/ckpt"},
        ),
        ("{}", SavedCheckpoint(5.0, 1, 4), {RESUME_STEP: "4"}),
    ],
)
def test_a_replacement_is_told_where_it_resumes(
    value: str | None, resume: SavedCheckpoint | None, expected: dict[str, str]
) -> None:
    assert resume_annotations(pod(value), resume) == expected
