"""Jobs files as every command reads them: one schema for ``submit``, ``check`` and ``place``.

A jobs file is ``jobs: [...]`` or one job mapping. A job that says what runs (``command``,
``env``, ``workdir``, or any other field only a submission has) is held to the API's rules,
as ``submit`` would be (:class:`~hetsched.controlplane.schemas.SubmitSpec`); a job without
them is a placement job (:class:`~hetsched.model.specs.JobSpec`, where ids, submit times and
larger sizes are allowed). Placement then ignores what runs and says so. Top-level keys
besides ``jobs`` (the demo's ``later``) are read by no command, and that is said too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hetsched.model.job import Job
from hetsched.model.specs import JobSpec, SpecError, load_yaml, validate_jobs

__all__ = [
    "JobFile",
    "is_job_document",
    "load_job_file",
    "resolve_workdirs",
    "run_fields",
    "validate_job_file",
]


def _names(model: type[JobSpec]) -> frozenset[str]:
    out: set[str] = set()
    for name, info in model.model_fields.items():
        out.add(name)
        if info.alias:
            out.add(info.alias)
    return frozenset(out)


@cache
def run_fields() -> frozenset[str]:
    """The fields a submission has and placement does not: what runs (``command``, ``env``,
    ``workdir``, ...), read from the API's model so that a field added there is known here.
    (Imported only for a file that has such a field: the API's package costs a second.)"""
    from hetsched.controlplane.schemas import SubmitSpec

    return _names(SubmitSpec) - _names(JobSpec)


def is_job_document(data: Any) -> bool:
    """A jobs document: ``jobs: [...]``, or one job mapping (what it runs or asks for)."""
    if not isinstance(data, dict) or "nodes" in data:
        return False
    return "jobs" in data or "resources" in data or "command" in data


@dataclass
class JobFile:
    """A validated jobs document: the placement models, what placement ignores of them, and
    the top-level keys no command reads."""

    specs: list[JobSpec]
    #: run fields the file's jobs use, sorted (placement ignores them)
    ignored_fields: list[str] = field(default_factory=list)
    #: top-level keys besides ``jobs``
    unread_keys: list[str] = field(default_factory=list)
    #: the submissions' own dumps (with what runs), by index in the file
    run_parts: dict[int, dict[str, Any]] = field(default_factory=dict)

    def build(self) -> list[Job]:
        requests: dict[Any, Any] = {}
        return [spec.build(requests) for spec in self.specs]

    def notes(self) -> list[str]:
        """What the file holds that placement does not read, one line each."""
        out: list[str] = []
        if self.ignored_fields:
            out.append(
                f"placement ignores {', '.join(self.ignored_fields)} "
                "(what a job runs, not where it goes)"
            )
        for key in self.unread_keys:
            out.append(f"{key}: not read (submit, check and place read the jobs under 'jobs')")
        return out

    def normalized(self) -> list[dict[str, Any]]:
        """Each job as validated, with what it runs, for ``check``."""
        out: list[dict[str, Any]] = []
        for index, spec in enumerate(self.specs):
            dumped = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
            if index in self.run_parts:
                dumped.pop("id", None)  # the service sets a submission's id
            out.append({**dumped, **self.run_parts.get(index, {})})
        return out


def resolve_workdirs(bodies: list[Any], folder: Path) -> list[Any]:
    """The jobs with a relative ``workdir`` made absolute against the file's folder (the
    service takes absolute ones only), as ``submit`` sends them."""
    out: list[Any] = []
    for body in bodies:
        workdir = body.get("workdir") if isinstance(body, dict) else None
        if isinstance(workdir, str) and workdir and not workdir.startswith("/"):
            body = {**body, "workdir": str((folder.resolve() / workdir).resolve())}
        out.append(body)
    return out


def validate_job_file(data: Any, source: str = "", folder: Path | None = None) -> JobFile:
    """The validated jobs of a document (relative workdirs against ``folder``); SpecError
    naming every problem of every job."""
    if isinstance(data, dict) and "jobs" in data:
        items = data["jobs"]
        unread = sorted(str(k) for k in data if k != "jobs")
        prefix = "jobs"
    else:
        items, unread, prefix = [data], [], "job"
    if not isinstance(items, list):
        return JobFile(validate_jobs({"jobs": items}, source).jobs)  # raises: not a list
    if folder is not None:
        items = resolve_workdirs(items, folder)
    placement_names = _names(JobSpec)
    beyond = any(isinstance(i, dict) and not placement_names.issuperset(i) for i in items)
    runs = run_fields() if beyond else frozenset()
    errors: list[str] = []
    refused: set[int] = set()
    placement: list[Any] = []
    run_parts: dict[int, dict[str, Any]] = {}
    used: set[str] = set()
    names: dict[str, int] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not runs & item.keys():
            placement.append(item)
            continue
        where = f"{prefix}[{index}]" if prefix == "jobs" else "job"
        own = _submission_errors(item)
        errors += [_at(where, line) for line in own]
        refused |= {index} if own else set()
        used |= runs & item.keys()
        run_parts[index] = {k: item[k] for k in item if k in runs}
        rest = {k: v for k, v in item.items() if k not in runs}
        # the service gives each submission its own id: a repeated name is no error here
        name = str(rest.get("name", ""))
        names[name] = names.get(name, 0) + 1
        if names[name] > 1 and "id" not in rest:
            rest["id"] = f"{name}-{names[name]}"
        placement.append(rest)
    errors += _ambiguous_after(items, run_parts, names)
    try:
        specs = validate_jobs({"jobs": placement}, source).jobs
    except SpecError as exc:
        # a submission refused above is reported once, in the API's words
        errors += [
            _single(line, prefix)
            for line in exc.errors
            if not any(line.startswith((f"jobs[{i}].", f"jobs[{i}]:")) for i in refused)
        ]
        specs = []
    if errors:
        raise SpecError(list(dict.fromkeys(errors)), source)
    return JobFile(specs, sorted(used), unread, run_parts)


def _ambiguous_after(
    items: list[Any], submissions: dict[int, Any], names: dict[str, int]
) -> list[str]:
    """A dependency on a name that several submissions of the file share: the service
    refuses it (which one is meant?), so ``check`` does too, in its words."""
    out: list[str] = []
    for index in submissions:
        after = items[index].get("after")
        for k, dep in enumerate(after if isinstance(after, list) else []):
            ref = dep.get("job") if isinstance(dep, dict) else dep
            if isinstance(ref, str) and names.get(ref, 0) > 1:
                out.append(
                    f"jobs[{index}].after[{k}]: {names[ref]} jobs of this submission"
                    f" are named {ref!r}"
                )
    return out


def _submission_errors(item: dict[str, Any]) -> list[str]:
    """What the service would refuse of the job, parsed as it parses a submission: the JSON
    ``submit`` sends, in strict mode (``"5"`` is no priority)."""
    from hetsched.controlplane.schemas import InvalidBody, error_lines, parse_submission

    try:
        parse_submission(json.dumps(item))
    except (TypeError, ValueError, InvalidBody) as exc:
        if isinstance(exc, ValidationError):
            return error_lines(exc)
        return [f": not JSON as submit sends it ({exc})"]
    return []


def _at(where: str, line: str) -> str:
    """``line`` (``field: message``, or ``: message`` of the whole job) at the job."""
    return f"{where}{line}" if line.startswith(": ") else f"{where}.{line}"


def _single(line: str, prefix: str) -> str:
    """A placement error as the file names it (``job.x`` for a file of one job)."""
    return line if prefix == "jobs" else "job" + line.removeprefix("jobs[0]")


def load_job_file(path: str | Path) -> JobFile:
    """The jobs file at ``path``, validated (SpecError naming the file and every problem)."""
    return validate_job_file(load_yaml(path), str(path), Path(path).parent)
