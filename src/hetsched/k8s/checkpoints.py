"""The checkpoint protocol on pods (docs/checkpointing.md, "In Kubernetes"): pure functions
over pod JSON, no client.

- **The declaration**: the ``hetsched.io/checkpoint`` annotation, the job file's
  ``checkpoint`` section as a JSON or YAML flow object (``{notice_s: 30s, interval_s: 10m,
  signal: SIGUSR1, dir: /ckpt}``), plus ``dir``: the job's checkpoint folder in the
  container (a persistent volume's mount), told to every pod of the job.
- **A report**: the ``hetsched.io/checkpointed`` annotation, which the container writes on
  its own pod (``hetsched checkpoint --step N --path P``): ``{"step", "path", "time"}``.
  A new value is a new report.
- **Resuming**: the annotations a pod of a checkpointable job gets in its Binding
  (``hetsched.io/checkpoint-dir``, and when the job has a checkpoint
  ``hetsched.io/resume-from`` and ``hetsched.io/resume-step``), which the container reads
  as ``HETSCHED_CHECKPOINT_DIR``, ``HETSCHED_RESUME_FROM``, ``HETSCHED_RESUME_STEP``
  through downward API env vars.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pydantic
import yaml

from hetsched.k8s.names import CHECKPOINT, CHECKPOINT_DIR, CHECKPOINTED, RESUME_FROM, RESUME_STEP
from hetsched.k8s.podrequest import TranslateError, mapping, pod_key, str_map
from hetsched.model.checkpoint import Checkpointing, SavedCheckpoint
from hetsched.model.specs import CheckpointSpec

__all__ = [
    "CheckpointDeclaration",
    "CheckpointReport",
    "declaration",
    "format_time",
    "parse_time",
    "report",
    "report_value",
    "reported",
    "resume_annotations",
]

#: the longest report read (the annotation is the pod's own words)
_REPORT_LIMIT = 16 * 1024


@dataclass(frozen=True, slots=True)
class CheckpointDeclaration:
    """What a pod's ``hetsched.io/checkpoint`` says: how the job saves, and where."""

    checkpointing: Checkpointing
    #: the job's checkpoint folder in the container ("" when the pod names none)
    directory: str = ""


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    """A checkpoint a pod reported: the step it reached, where it saved, and when (wall
    time, seconds since the epoch; None when it did not say)."""

    step: int | None
    path: str
    time: float | None


def format_time(wall: float, millis: bool = False) -> str:
    """``2026-11-30T21:05:03Z``: RFC 3339 in UTC, to the second (as Kubernetes writes), or
    to the millisecond (``...03.250Z``)."""
    stamp = datetime.fromtimestamp(wall, UTC)
    if millis:
        return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time; ValueError when it is not one."""
    try:
        stamp = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"expected an RFC 3339 time, got {text!r}") from None
    if stamp.tzinfo is None:
        raise ValueError(f"expected an RFC 3339 time with a zone (Z), got {text!r}")
    return stamp.timestamp()


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = mapping(obj.get("metadata"), "metadata")
    return str_map(meta.get("annotations"), "metadata.annotations")


def declaration(obj: Mapping[str, Any]) -> CheckpointDeclaration | None:
    """The pod's checkpoint declaration (None without the annotation); a TranslateError
    naming the annotation and the field when it does not read as one."""
    raw = _annotations(obj).get(CHECKPOINT)
    if raw is None:
        return None
    where = f"pod {pod_key(obj)}: annotation {CHECKPOINT}"
    try:
        value = yaml.safe_load(raw) if raw.strip() else {}
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TranslateError(f"{where}: not a JSON or YAML object ({problem}): {raw!r}") from None
    if not isinstance(value, dict):
        raise TranslateError(
            f'{where}: must be an object such as {{"notice_s": "30s"}}, got {raw!r}'
        )
    fields = dict(value)
    directory = fields.pop("dir", "")
    if not isinstance(directory, str) or "\n" in directory:
        raise TranslateError(f"{where}: dir must be a path in the container, got {directory!r}")
    try:
        spec = CheckpointSpec.model_validate(fields)
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"]) or "value"
        message = str(error["msg"]).removeprefix("Value error, ")
        raise TranslateError(f"{where}: {field}: {message}") from None
    return CheckpointDeclaration(spec.build(), directory)


def report_value(step: int, path: str, wall: float) -> str:
    """The ``hetsched.io/checkpointed`` value of a report (what the CLI writes)."""
    # to the millisecond: two reports within a second keep their order
    body = {"step": step, "path": path, "time": format_time(wall, millis=True)}
    return json.dumps(body, separators=(",", ":"))


def report(raw: str) -> CheckpointReport:
    """A ``hetsched.io/checkpointed`` value as a report; ValueError naming the field when it
    is not one."""
    if len(raw) > _REPORT_LIMIT:
        raise ValueError(f"longer than {_REPORT_LIMIT} characters")
    try:
        value = json.loads(raw)
    except ValueError:
        raise ValueError(f'not JSON such as {{"step": 10, "path": "/ckpt/10"}}: {raw!r}') from None
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object, got {raw!r}")
    step = value.get("step")
    if step is not None and (
        isinstance(step, bool) or not isinstance(step, int | float) or step < 0
    ):
        raise ValueError(f"step must be a whole number >= 0, got {step!r}")
    if isinstance(step, float):
        if not (math.isfinite(step) and step.is_integer()):
            raise ValueError(f"step must be a whole number >= 0, got {step!r}")
        step = int(step)
    path = value.get("path", "")
    if not isinstance(path, str):
        raise ValueError(f"path must be a string, got {path!r}")
    at = value.get("time")
    if at is not None and not isinstance(at, str):
        raise ValueError(f"time must be an RFC 3339 string, got {at!r}")
    return CheckpointReport(step, path, parse_time(at) if at else None)


def reported(obj: Mapping[str, Any]) -> str | None:
    """The pod's raw ``hetsched.io/checkpointed`` value (None without one)."""
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping):
        return None
    raw = annotations.get(CHECKPOINTED)
    return None if raw is None else str(raw)


def resume_annotations(obj: Mapping[str, Any], resume: SavedCheckpoint | None) -> dict[str, str]:
    """The annotations that tell a pod of a checkpointable job where it resumes (written in
    its Binding; see the module docstring). Empty for a pod that declares no checkpoint."""
    declared = declaration(obj)
    if declared is None:
        return {}
    out: dict[str, str] = {}
    if declared.directory:
        out[CHECKPOINT_DIR] = declared.directory
    if resume is not None:
        where = resume.path or declared.directory
        if where:
            out[RESUME_FROM] = where
        if resume.step is not None:
            out[RESUME_STEP] = str(resume.step)
    return out
