"""``hetsched check``: validate a cluster, jobs or profile file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from hetsched.cli.jobfile import is_job_document, validate_job_file
from hetsched.cli.output import INVALID_INPUT, OutputFormat, console, fail, print_json
from hetsched.cli.parser_cache import load_cel_parser
from hetsched.framework.profile import ProfileError, parse_profile
from hetsched.model.quantity import format_cpu, format_memory
from hetsched.model.selector import set_parser_source
from hetsched.model.specs import SpecError, load_yaml, validate_cluster

__all__ = ["check", "check_document", "with_units"]


def check_document(path: Path) -> tuple[str, Any, list[str]]:
    """Validate ``path``; returns (kind, normalized document, notes: what the file holds
    that placement does not read) or raises SpecError."""
    data = load_yaml(path)
    source = str(path)
    # validated once: the model checks the rules, builds the nodes or jobs (which checks
    # what only the built objects show, such as duplicate node names) and is printed
    if isinstance(data, dict) and "nodes" in data:
        cluster = validate_cluster(data, source)
        cluster.build()
        dumped = cluster.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        return "cluster", dumped, []
    if is_job_document(data):
        # the one job schema: what `submit` accepts (a submission is held to the API's
        # rules), and placement files with ids and sizes of their own
        jobs = validate_job_file(data, source, path.parent)
        jobs.build()
        return "jobs", {"jobs": jobs.normalized()}, jobs.notes()
    if not isinstance(data, dict):
        kind = "nothing" if data is None else f"a {type(data).__name__}"
        wanted = "a cluster (nodes: ...), jobs (jobs: [...] or one job) or a profile"
        raise SpecError([f"expected a mapping: {wanted}; found {kind}"], source)
    try:
        spec = parse_profile(data, path.parent)
    except ProfileError as exc:
        raise SpecError(str(exc).splitlines(), source) from None
    return "profile", spec.model_dump(mode="json"), []


def check(
    file: Annotated[Path, typer.Argument(help="A cluster, jobs or profile YAML file.")],
    output: Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")] = (
        OutputFormat.table
    ),
) -> None:
    """Validate a spec file and print its normalized form, or every error with its field path.

    The kind is recognised from the top-level key: ``nodes`` (cluster), ``jobs`` or one job
    mapping (jobs), otherwise a profile. A jobs file is checked as ``submit`` and ``place``
    read it: a job with a ``command`` by the service's rules; the note lines say which
    fields placement ignores. Exit code 2 when there are errors.
    """
    set_parser_source(load_cel_parser)  # a short run: the CEL parser's tables from the cache
    try:
        kind, normalized, notes = check_document(file)
    except SpecError as exc:
        if output is OutputFormat.json:
            print_json({"file": str(file), "valid": False, "errors": exc.errors})
            raise typer.Exit(INVALID_INPUT) from None
        fail(str(exc), INVALID_INPUT)
    if output is OutputFormat.json:
        doc = {"file": str(file), "valid": True, "kind": kind, "normalized": normalized}
        print_json({**doc, "notes": notes})
        return
    console.print(f"[green]{file}: valid {kind}[/green]", highlight=False, soft_wrap=True)
    for note in notes:
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    shown = with_units(normalized) if kind in ("cluster", "jobs") else normalized
    console.print(yaml.safe_dump(shown, sort_keys=False), markup=False, highlight=False)


def with_units(document: Any) -> Any:
    """A normalized cluster or jobs document for people: every ``cpu`` (millicores) and
    ``memory`` (MiB) in Kubernetes notation (``16``, ``128Gi``), as the files write them.
    ``-o json`` keeps the numbers, for programs."""
    if isinstance(document, list):
        return [with_units(item) for item in document]
    if not isinstance(document, dict):
        return document
    out: dict[str, Any] = {}
    for key, value in document.items():
        if key in _UNITS and isinstance(value, int) and not isinstance(value, bool):
            out[key] = _UNITS[key](value)
        else:
            out[key] = with_units(value)
    return out


def _cores(milli: int) -> int | str:
    """Whole cores as a number (``cpu: 16``), others in millicores (``cpu: 500m``)."""
    return milli // 1000 if milli % 1000 == 0 else format_cpu(milli)


_UNITS: dict[str, Callable[[int], int | str]] = {"cpu": _cores, "memory": format_memory}
