"""``hetsched sim topology``: what topology awareness buys under a network cost."""

from __future__ import annotations

from typing import Annotated

import typer

from hetsched.cli.output import OutputFormat, fail, print_json
from hetsched.cli.progress import steps
from hetsched.cli.tables import Col, Grid, print_table
from hetsched.sim.experiments.topology import WAYS, study
from hetsched.sim.network import DEFAULT_FACTORS

__all__ = ["topology"]

#: the table's columns: the way and the level counts are kept whole (the counts wrap
#: between levels), the figures of least interest left out first on a narrow terminal
_COLUMNS = [
    Col("way", keep=True),
    Col("finished", drop=2, right=True),
    Col("JCT mean h", keep=True, right=True),
    Col("JCT p99 h", drop=1, right=True),
    Col("wait mean h", drop=3, right=True),
    Col("GPU util", drop=5, right=True),
    Col("fragmentation", drop=6, right=True),
    Col("multi-node gangs by level", keep=True, wrap=True),
]


def _factors(text: str) -> dict[str, float]:
    """``rack=0.9,block=0.75,across=0.5`` over the defaults; a bad entry names itself."""
    out = dict(DEFAULT_FACTORS)
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = entry.partition("=")
        try:
            factor = float(value)
        except ValueError:
            factor = -1.0
        if not name or not 0 < factor <= 1:
            fail(f"--factors: {entry!r}: expected LEVEL=F with 0 < F <= 1", 2)
        out[name.strip()] = factor
    return out


def topology(
    jobs: Annotated[int, typer.Option(min=1, help="Jobs in the synthetic workload.")] = 400,
    load: Annotated[
        float, typer.Option(min=0.05, help="Offered load: GPU demand over what the cluster has.")
    ] = 0.85,
    seed: Annotated[int, typer.Option(help="Workload seed.")] = 0,
    blocks: Annotated[int, typer.Option(min=1, help="Blocks in the cluster.")] = 4,
    racks: Annotated[int, typer.Option(min=1, help="Racks per block.")] = 4,
    rack_nodes: Annotated[
        int, typer.Option(min=1, help="Nodes per rack (8 GPUs each; NVLink domains of 4).")
    ] = 8,
    factors: Annotated[
        str,
        typer.Option(
            help="Speed of a gang by the narrowest level holding it, over the defaults "
            "host=1,nvlink-domain=1,rack=0.9,block=0.75,across=0.5."
        ),
    ] = "",
    output: Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")] = (
        OutputFormat.table
    ),
) -> None:
    """Run one synthetic LLM-training workload three ways (topology-unaware, required,
    preferred) on a cluster of blocks, racks and NVLink domains, where a gang runs slower
    the broader the narrowest domain that holds all its tasks, and compare job completion
    time, wait, GPU utilization, fragmentation (free GPUs outside wholly free NVLink
    domains, as gangs start) and where the gangs ran."""
    shape, cost = (blocks, racks, rack_nodes), _factors(factors)
    quiet = output is OutputFormat.json
    with steps(f"sim topology, {jobs} jobs", len(WAYS), quiet) as step:
        outcomes = study(jobs, load, seed, shape, cost, done=step)
    if output is OutputFormat.json:
        print_json({"ways": [o.to_dict() for o in outcomes]})
        return
    grid = Grid(f"{jobs} jobs, load {load:g}, seed {seed}", _COLUMNS)
    for o in outcomes:
        spans = ", ".join(f"{k} {v}" for k, v in o.spans.items()) or "-"
        grid.add(
            o.way,
            f"{o.finished}/{o.jobs}",
            f"{o.jct_mean_h:.2f}",
            f"{o.jct_p99_h:.2f}",
            f"{o.wait_mean_h:.2f}",
            f"{o.utilization:.1%}",
            f"{o.fragmentation:.1%}",
            spans,
        )
    print_table(grid)  # fitted to a terminal, plain columns through a pipe: no name cut
