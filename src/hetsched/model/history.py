"""The history format: what a scheduler did (``hetsched up``, or the Kubernetes scheduler),
as ``hetsched history export`` writes it and ``hetsched sim replay --history`` reads it.

One JSON document: the format's name and version, where it came from, the profile and
seed the scheduler ran under, the cluster's nodes (cluster-file entries, with when each
joined and left), and every job: its submission (the job spec as accepted, without the
command, environment and working directory), its submit time, and what happened to it
(its runs: which task ran on which node and devices, from when to when, how each ended;
its final state, reason and exit code; preemptions and restarts; when a cancel was asked).

Times are seconds since ``origin`` (the wall-clock time of the first submission), so a
replay starts at 0. A document of another format or version is refused naming what it is
and what was expected (:func:`parse_history`); the pydantic models below are the one
statement of the fields.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hetsched.model.job import DeviceChoice, Job, TaskRequest
from hetsched.model.lifecycle import JobState
from hetsched.model.spec_common import SpecError, format_errors

__all__ = [
    "FORMAT",
    "VERSION",
    "HistoryDocument",
    "HistoryJob",
    "HistoryNode",
    "HistoryRun",
    "job_spec_document",
    "load_history",
    "parse_history",
]

#: the format's name, the first field of every document
FORMAT = "hetsched-history"
#: the version this hetsched writes and reads; a change of meaning raises it
VERSION = 1


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HistoryNode(_Closed):
    """A node: its cluster-file entry, its devices' ids in the entry's order (what the
    runs name), and when it joined and left (None: still there)."""

    entry: dict[str, Any]
    device_ids: tuple[str, ...] = ()
    joined_s: float = Field(allow_inf_nan=False)
    left_s: float | None = Field(default=None, allow_inf_nan=False)


class HistoryRun(_Closed):
    """One task of one run of a job: where and when it ran and how it ended.

    ``state`` is the task's: ``exited`` (ended on its own), ``stopped`` (stopped by the
    scheduler or a cancel), ``lost`` (gone without a trace), or ``starting``/``running``/
    ``stopping`` when the history was taken while it ran."""

    run: int = Field(ge=0)
    task: int = Field(ge=0)
    node: str
    cpu_milli: int = Field(default=0, ge=0)
    devices: tuple[str, ...] = ()
    #: milli-units held of each of ``devices`` (1000: the whole device)
    shares: tuple[int, ...] = ()
    #: when the scheduler placed it (one time for every task placed in one turn)
    bound_s: float = Field(ge=0, allow_inf_nan=False)
    started_s: float | None = None
    ended_s: float | None = None
    state: str
    exit_code: int | None = None
    reason: str = ""


class HistoryJob(_Closed):
    """A job: its spec (the job-spec fields of the submission), when it came, what it did."""

    id: str = Field(min_length=1)
    user: str
    spec: dict[str, Any]
    submit_s: float = Field(ge=0, allow_inf_nan=False)
    #: the element index of an array's element (its spec is the array's)
    element: int | None = Field(default=None, ge=0)
    state: JobState
    reason: str = ""
    exit_code: int | None = None
    first_started_s: float | None = None
    ended_s: float | None = None
    preemptions: int = Field(default=0, ge=0)
    restarts: int = Field(default=0, ge=0)
    #: when it was cancelled (the first transition to cancelled), None: never; and why (a
    #: user's cancel, a dependency that can no longer be met, ...)
    cancelled_s: float | None = None
    cancel_cause: str = ""
    runs: tuple[HistoryRun, ...] = ()


class HistoryDocument(_Closed):
    """The whole document (see the module docstring)."""

    format: Literal["hetsched-history"] = "hetsched-history"
    version: Literal[1] = 1
    #: where it came from: ``hetsched up`` (its store, without credentials), or kubernetes
    source: str
    #: wall-clock seconds of time 0
    origin: float
    #: when the history was taken, in seconds since ``origin``
    taken_s: float
    #: the profile the scheduler ran under (a profile document; None: not recorded)
    profile: dict[str, Any] | None = None
    seed: int = 0
    nodes: tuple[HistoryNode, ...] = ()
    jobs: tuple[HistoryJob, ...] = ()


def _check_header(data: Any, source: str) -> None:
    """The format and version first, so a file of another kind is named as such rather
    than listed field by field."""
    if not isinstance(data, dict):
        raise SpecError([f"expected a {FORMAT} document (a JSON object)"], source)
    name = data.get("format")
    if name != FORMAT:
        raise SpecError([f"format: expected {FORMAT!r}, got {name!r}"], source)
    version = data.get("version")
    if version != VERSION:
        raise SpecError(
            [
                f"version: this hetsched reads {FORMAT} version {VERSION}, the file is "
                f"version {version!r} (export it again with this hetsched)"
            ],
            source,
        )


def parse_history(data: Any, source: str = "") -> HistoryDocument:
    """The validated document; SpecError naming every problem (another format or version
    first, alone)."""
    _check_header(data, source)
    try:
        return HistoryDocument.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_errors(exc), source) from None


def load_history(path: str | Path) -> HistoryDocument:
    """Read a history file; SpecError when it cannot be read or does not validate."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError([f"cannot read: {exc.strerror}"], source) from None
    except UnicodeDecodeError as exc:
        raise SpecError([f"not UTF-8 text: {exc.reason}"], source) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError([f"not JSON: {exc.msg} (line {exc.lineno})"], source) from None
    return parse_history(data, source)


def _choice(choice: DeviceChoice) -> dict[str, Any]:
    out: dict[str, Any] = {"class": choice.device_class, "count": choice.count}
    out["share"] = choice.share
    return out | ({"selector": choice.selector} if choice.selector else {})


def _resources(request: TaskRequest) -> dict[str, Any]:
    devices = [
        _choice(d.choices[0]) | ({"alternatives": [_choice(c) for c in d.choices[1:]]})
        for d in request.devices
    ]
    out: dict[str, Any] = {"cpu": f"{request.cpu_milli}m", "memory": f"{request.memory_mib}Mi"}
    out["devices"] = devices
    if request.node_selector:
        out["node_selector"] = dict(request.node_selector)
    if request.tolerations:
        out["tolerations"] = [
            {"key": t.key, "value": t.value, "effect": None if t.effect is None else t.effect.value}
            for t in request.tolerations
        ]
    return out


def job_spec_document(job: Job) -> dict[str, Any]:
    """A job known only as a :class:`Job` (a Kubernetes pod, say) as the ``spec`` of a
    history job: its name, queue, priority, tasks, what each asks for, whether it may be
    preempted, its estimate. What a job spec says beyond these (speeds, checkpoints,
    network topology, dependencies) is not carried."""
    out: dict[str, Any] = {
        "name": job.name or job.id,
        "queue": job.queue,
        "priority": job.priority,
        "replicas": job.replicas,
        "preemptible": job.preemptible,
        "resources": _resources(job.resources),
    }
    if job.gang is not None:
        out["gang"] = job.gang
    if job.estimated_runtime_s is not None:
        out["estimated_runtime"] = job.estimated_runtime_s
    return out
