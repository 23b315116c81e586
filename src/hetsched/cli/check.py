"""``hetsched check``: validate a cluster, jobs or profile file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from hetsched.cli.output import OutputFormat, console, fail, print_json
from hetsched.cli.parser_cache import load_cel_parser
from hetsched.framework.profile import ProfileError, parse_profile
from hetsched.model.selector import set_parser_source
from hetsched.model.specs import SpecError, load_yaml, validate_cluster, validate_jobs

__all__ = ["check", "check_document"]


def check_document(path: Path) -> tuple[str, Any]:
    """Validate ``path``; returns (kind, normalized document) or raises SpecError."""
    data = load_yaml(path)
    source = str(path)
    # validated once: the model checks the rules, builds the nodes or jobs (which checks
    # what only the built objects show, such as duplicate node names) and is printed
    if isinstance(data, dict) and "nodes" in data:
        cluster = validate_cluster(data, source)
        cluster.build()
        return "cluster", cluster.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    if isinstance(data, dict) and "jobs" in data:
        jobs = validate_jobs(data, source)
        jobs.build()
        return "jobs", jobs.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    try:
        spec = parse_profile(data, path.parent)
    except ProfileError as exc:
        raise SpecError(str(exc).splitlines(), source) from None
    return "profile", spec.model_dump(mode="json")


def check(
    file: Annotated[Path, typer.Argument(help="A cluster, jobs or profile YAML file.")],
    output: Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")] = (
        OutputFormat.table
    ),
) -> None:
    """Validate a spec file and print its normalized form, or every error with its field path.

    The kind is recognised from the top-level key: ``nodes`` (cluster), ``jobs`` (jobs),
    otherwise a profile. Exit code 2 when there are errors.
    """
    set_parser_source(load_cel_parser)  # a short run: the CEL parser's tables from the cache
    try:
        kind, normalized = check_document(file)
    except SpecError as exc:
        if output is OutputFormat.json:
            print_json({"file": str(file), "valid": False, "errors": exc.errors})
            raise typer.Exit(2) from None
        fail(str(exc), 2)
    if output is OutputFormat.json:
        print_json({"file": str(file), "valid": True, "kind": kind, "normalized": normalized})
        return
    console.print(f"[green]{file}: valid {kind}[/green]", highlight=False)
    console.print(yaml.safe_dump(normalized, sort_keys=False), markup=False, highlight=False)
