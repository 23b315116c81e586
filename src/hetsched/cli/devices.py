"""``hetsched devices``: what this machine (only this one) has, as the discovery backends
see it; ``hetsched nodes`` lists a cluster's."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from hetsched.agent.backends import backend_names, discover
from hetsched.cli.output import OutputFormat, fail, print_json
from hetsched.cli.tables import Col, Grid, print_table
from hetsched.model.specs import SpecError

__all__ = ["devices"]


_COLUMNS = (
    Col("class", keep=True),
    Col("vendor", drop=1),
    Col("model", keep=True),
    Col("health", keep=True),
    Col("found by", drop=2),
    Col("attributes", wrap=True, drop=3),
)


def devices(
    backend: Annotated[
        str,
        typer.Option(
            "--backend",
            "-b",
            help="Comma-separated backends: cpu, nvidia, pci, fake.",
        ),
    ] = "cpu,nvidia,pci",
    sysfs_root: Annotated[
        Path, typer.Option("--sysfs-root", help="Where sysfs is (a copy, for tests).")
    ] = Path("/sys"),
    fake: Annotated[
        Path | None, typer.Option("--fake", help="The fake backend's YAML device file.")
    ] = None,
    output: Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")] = (
        OutputFormat.table
    ),
) -> None:
    """Devices of this machine only, as its discovery backends see them.

    Class, vendor, model, attributes and health of the devices where the command runs; a
    cluster's nodes and devices: ``hetsched nodes``."""
    names = [n.strip() for n in backend.split(",") if n.strip()]
    if fake is not None and "fake" not in names:
        names.append("fake")
    unknown = [n for n in names if n not in backend_names()]
    if unknown:
        fail(f"unknown backend {unknown[0]!r} (known: {', '.join(backend_names())})")
    # the backends' one line each about what is missing goes to stderr
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        found = discover(names, sysfs_root=sysfs_root, fake_file=fake)
    except SpecError as exc:
        fail(str(exc))
    if output is OutputFormat.json:
        print_json([d.to_dict() for d in found])
        return
    grid = Grid(f"Devices of this machine ({len(found)})", _COLUMNS)
    for d in found:
        attributes = ", ".join(f"{k}={v}" for k, v in d.attributes.items())
        grid.add(d.device_class, d.vendor, d.model, d.health.value, d.source, attributes)
    print_table(grid)
