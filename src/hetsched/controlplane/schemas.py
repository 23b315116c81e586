"""Submission bodies: the API's JobSpec, validated strictly, and the check that some node
could ever hold a task.

A submission is a :class:`~hetsched.model.specs.JobSpec` plus what runs: ``command`` (argv,
no shell), ``env`` and ``workdir``. JSON bodies are parsed in strict mode: ``"2"`` is not an
integer and ``1.5`` is not a count. The server sets the job id, the owner (from the token)
and the submit time; a body that tries to set them is refused.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Iterable
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from hetsched.cluster.state import ClusterState
from hetsched.controlplane.identity import check_user_name
from hetsched.framework.cycle import CycleContext
from hetsched.framework.profile import ProfileSpec
from hetsched.framework.runtime import Framework
from hetsched.model.device import SHARE_UNITS, Node
from hetsched.model.job import Job
from hetsched.model.specs import JobSpec, ResourcesSpec, format_errors
from hetsched.model.workflow import find_cycle, split_element
from hetsched.scheduler.events import DeviceAdded

__all__ = [
    "ARRAY_ENV",
    "MAX_BATCH_BODY_BYTES",
    "MAX_BATCH_JOBS",
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "BatchSpec",
    "Feasibility",
    "InvalidBody",
    "SubmitSpec",
    "Unsatisfiable",
    "error_lines",
    "from_stored",
    "parse_batch",
    "parse_submission",
]

MAX_BODY_BYTES = 1 << 20
#: a batch of jobs (``POST /v1/jobs/batch``): at most this many jobs and bytes
MAX_BATCH_JOBS = 5000
MAX_BATCH_BODY_BYTES = 8 << 20
#: how deep JSON arrays and objects may nest in a body (the JSON parser's recursion limit)
MAX_JSON_DEPTH = 200
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_DENIED_ENV = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"})
#: what an array's element is told (the launcher sets them; a federation passes them on)
ARRAY_ENV = frozenset({"HETSCHED_ARRAY_JOB_ID", "HETSCHED_ARRAY_INDEX", "HETSCHED_ARRAY_SIZE"})
_MAX_ARGV_BYTES = 256 * 1024
_MAX_CPU_MILLI = 10**7  # 10,000 cores
_MAX_MEMORY_MIB = 1 << 30  # 1 PiB
_MAX_RUNTIME_S = 365 * 86400.0


def _clean_name(value: str) -> str:
    value = unicodedata.normalize("NFC", value)
    if not _NAME.match(value):
        raise ValueError(
            "must be 1-63 characters of letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


class SubmitSpec(JobSpec):
    """One job as the API takes it."""

    name: str = Field(min_length=1, max_length=63)
    queue: str = Field(default="default", min_length=1, max_length=63)
    priority: int = Field(default=0, ge=-1000, le=1000)
    replicas: int = Field(default=1, ge=1, le=1000)
    max_restarts: int = Field(default=0, ge=0, le=10)
    command: list[str] = Field(min_length=1, max_length=4096)
    env: dict[str, str] = Field(default_factory=dict, max_length=256)
    workdir: str | None = Field(default=None, max_length=4096)
    #: the federation that sent the job: it runs only while that federation's lease here
    #: is live (docs/federation.md); a plain submission leaves it out
    federation: str | None = Field(default=None, min_length=1, max_length=63)

    @field_validator("name", "queue", "federation")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else _clean_name(value)

    @field_validator("user")
    @classmethod
    def _user(cls, value: str, info: ValidationInfo) -> str:
        # the one user-name rule of tokens (identity.py); a stored job validated once
        stored = isinstance(info.context, dict) and info.context.get("stored")
        return value if stored else check_user_name(value)

    @field_validator("id")
    @classmethod
    def _no_id(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError("is set by the server")
        return value

    @field_validator("submit_time")
    @classmethod
    def _no_submit_time(cls, value: float) -> float:
        if value:
            raise ValueError("is set by the server")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if not value[0]:
            raise ValueError("the program (first element) must not be empty")
        if any("\x00" in arg for arg in value):
            raise ValueError("arguments must not contain NUL")
        if sum(len(arg.encode()) for arg in value) > _MAX_ARGV_BYTES:
            raise ValueError(f"argv is larger than {_MAX_ARGV_BYTES} bytes")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not _ENV_KEY.match(key):
                raise ValueError(f"{key!r} is not a valid variable name")
            if key in _DENIED_ENV or (key.startswith("HETSCHED_") and key not in ARRAY_ENV):
                raise ValueError(f"{key!r} may not be set by a job")
            if "\x00" in item or len(item) > 32768:
                raise ValueError(f"value of {key!r} contains NUL or is longer than 32768")
        return value

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or "\x00" in value):
            raise ValueError("must be an absolute path")
        return value

    @field_validator("max_runtime_s", "estimated_runtime_s")
    @classmethod
    def _runtime(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value <= _MAX_RUNTIME_S:
            raise ValueError(f"must be more than 0 and at most {_MAX_RUNTIME_S:.0f}s")
        return value

    @model_validator(mode="after")
    def _array_env(self) -> SubmitSpec:
        # a federation sends an element of its array as a job of its own, told its index
        given = sorted(ARRAY_ENV.intersection(self.env))
        if given and self.federation is None:
            raise ValueError(f"env: {given[0]!r} may not be set by a job")
        return self

    @model_validator(mode="after")
    def _sizes(self) -> SubmitSpec:
        if self.groups is None:
            _check_request(self.resources, "resources")
            return self
        for index, group in enumerate(self.groups):
            _check_request(group.resources, f"groups[{index}].resources")
            if group.command is not None:
                try:
                    SubmitSpec._command(group.command)
                except ValueError as exc:
                    raise ValueError(f"groups[{index}].command: {exc}") from None
        total = sum(g.replicas for g in self.groups)
        if total > 1000:
            raise ValueError(f"groups: at most 1000 tasks in all, got {total}")
        return self

    def to_job(self, job_id: str, owner: str, submit_time: float) -> Job:
        """The job; for an element's id (``ID[7]``, its row holds its array's spec), that
        element of the array."""
        element = split_element(job_id) if self.array is not None else None
        own_id = job_id if element is None else element[0]
        spec = self.model_copy(update={"id": own_id, "user": owner, "submit_time": submit_time})
        job = JobSpec.build(spec)
        return job if element is None else job.element(element[1])


def _check_request(res: ResourcesSpec, where: str) -> None:
    if res.cpu_milli > _MAX_CPU_MILLI:
        raise ValueError(f"{where}.cpu: at most {_MAX_CPU_MILLI // 1000} cores")
    if res.memory_mib > _MAX_MEMORY_MIB:
        raise ValueError(f"{where}.memory: at most 1Pi")
    if res.cpu_milli == 0 and res.memory_mib == 0 and not res.devices:
        raise ValueError(f"{where}: empty request (ask for cpu, memory or a device)")


class InvalidBody(ValueError):
    """Not JSON at all (400), as opposed to JSON that does not validate (422)."""


def parse_submission(body: bytes | str) -> SubmitSpec:
    """Validate a JSON body strictly; raises InvalidBody or pydantic's ValidationError."""
    try:
        return SubmitSpec.model_validate_json(body, strict=True)
    except ValidationError as exc:
        _raise_if_not_json(exc)
        raise


def _raise_if_not_json(exc: ValidationError) -> None:
    """InvalidBody if the parser refused the body itself: not JSON at all, or JSON nested
    deeper than the parser follows (valid, but no job is shaped like that)."""
    for error in exc.errors():
        if error["type"] != "json_invalid":
            continue
        detail = str((error.get("ctx") or {}).get("error", ""))
        if "recursion limit" in detail:
            where = detail.rpartition(" at ")[2] if " at " in detail else "somewhere"
            raise InvalidBody(
                f"body is nested too deeply: arrays and objects may nest at most "
                f"{MAX_JSON_DEPTH} levels ({where})"
            )
        raise InvalidBody("body is not valid JSON")


class BatchSpec(BaseModel):
    """Many jobs in one request, accepted or refused together."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[SubmitSpec] = Field(min_length=1, max_length=MAX_BATCH_JOBS)

    @model_validator(mode="after")
    def _no_cycle(self) -> BatchSpec:
        names: dict[str, int] = {}
        for job in self.jobs:
            names[job.name] = names.get(job.name, 0) + 1
        edges = {
            job.name: [d.job for d in job.after if names.get(d.job) == 1]
            for job in self.jobs
            if names[job.name] == 1
        }
        cycle = find_cycle(edges)
        if cycle is not None:
            raise ValueError("jobs: dependency cycle: " + " -> ".join(cycle))
        return self


def parse_batch(body: bytes | str) -> BatchSpec:
    """Validate a batch body strictly; errors name the item (``jobs[3].resources.cpu``)."""
    try:
        return BatchSpec.model_validate_json(body, strict=True)
    except ValidationError as exc:
        _raise_if_not_json(exc)
        raise


def from_stored(data: dict[str, Any]) -> SubmitSpec:
    """A stored submission (the body as accepted) back into a spec; it validated once."""
    return SubmitSpec.model_validate(data, context={"stored": True})


def error_lines(exc: ValidationError) -> list[str]:
    """``field.path: message`` per problem (model-level problems name their field inline)."""
    return [line.removeprefix(": ") for line in format_errors(exc)]


class Unsatisfiable(ValueError):
    """No node could hold a task of the job even if it were empty."""


class Feasibility:
    """Checks a job against the cluster's total capacity (nothing allocated).

    Only capacity, labels and taints are checked (the default filters); the answer does not
    depend on what runs now, so a job refused here could never start.
    """

    def __init__(self, nodes: list[Node]) -> None:
        self._nodes = {node.name: node for node in nodes}
        self.state = ClusterState(nodes)
        self.framework = Framework(ProfileSpec())

    def extend(self, nodes: list[Node]) -> None:
        """Nodes that joined (a Ray cluster's): jobs that fit them are no longer refused.
        Nodes that left are kept, since they may come back. Called from one thread; the
        state is swapped whole, so a check running meanwhile reads one or the other."""
        fresh = [node for node in nodes if node.name not in self._nodes]
        if not fresh:
            return
        self._nodes.update((node.name, node) for node in fresh)
        self.state = ClusterState(list(self._nodes.values()))

    def devices_added(self, events: Iterable[object]) -> None:
        """Count hot-plugged devices (``DeviceAdded`` among ``events``; others are ignored)
        from now on: a device absent when the service started, plugged in later, makes the
        jobs that need it admissible. Called from the device watcher's thread; the new
        state replaces the old one whole, so a check in progress reads one or the other."""
        changed = False
        for event in events:
            if not isinstance(event, DeviceAdded):
                continue
            node = self._nodes.get(event.node_name)
            if node is None or any(d.id == event.device.id for d in node.devices):
                continue
            devices = (*node.devices, event.device)
            self._nodes[node.name] = dataclasses.replace(node, devices=devices)
            changed = True
        if changed:
            self.state = ClusterState(list(self._nodes.values()))

    def check(self, job: Job) -> None:
        for group in job.groups or (None,):
            request = job.resources if group is None else group.resources
            ctx = CycleContext(self.state, job, request, 0.0, what_if=True)
            if not self.framework.feasible(ctx).any():
                lines = [str(r) for r in self.framework.diagnose(ctx)]
                detail = "; ".join(lines) or "no node matches"
                which = "a task" if group is None else f"a task of group {group.name}"
                raise Unsatisfiable(
                    f"no node could ever hold {which} ({request.describe()}): {detail}"
                )
        if not job.groups:
            self._check_gang(job)

    def _check_gang(self, job: Job) -> None:
        """A gang whose tasks together need more devices (or CPU) than the whole cluster has
        could never start."""
        gang = job.gang_min
        if gang <= 1:
            return
        request = job.resources
        if gang * request.cpu_milli > int(self.state.cpu_cap.sum()):
            raise Unsatisfiable(f"gang of {gang}: more CPU than the whole cluster has")
        for device in request.devices:
            if len(device.choices) != 1:
                continue  # alternatives: too many combinations to bound cheaply
            choice = device.primary
            have = int(self.state.device_mask(choice.device_class, choice.selector).sum())
            need = gang * choice.count * choice.share / SHARE_UNITS
            if need > have:
                raise Unsatisfiable(
                    f"gang of {gang} needs {need:g} {choice.device_class} devices at once; "
                    f"the cluster has {have} that match"
                )
