"""``hetsched ray``: Ray clusters for hetsched (a throwaway local one for demos and tests)."""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from hetsched.cli.output import OutputFormat, fail
from hetsched.cli.signals import stop_on_signals
from hetsched.cli.tables import Col, Grid, print_table
from hetsched.model.quantity import QuantityError, parse_memory

if TYPE_CHECKING:
    from hetsched.ray.local import LocalCluster, LocalNodeSpec

__all__ = ["local", "ray_app"]

ray_app = typer.Typer(
    help="Ray: run hetsched's tasks on a Ray cluster; `ray local` makes one on this machine.",
    no_args_is_help=True,
)

_err = Console(stderr=True)


@ray_app.command("local")
def local(
    nodes: Annotated[
        str,
        typer.Option(
            help="One raylet per entry, MODEL:GPUS, comma-separated: a100:2,t4:1,cpu:0 "
            "(nodes are named a100-0, t4-0, cpu-0; cpu:0 has no GPU).",
        ),
    ],
    fake_devices: Annotated[
        bool,
        typer.Option(
            "--fake-devices",
            help="Give each node fake-backend devices (its model and count) for hetsched's "
            "discovery; without it hetsched takes Ray's logical GPUs as the devices.",
        ),
    ] = False,
    host: Annotated[str, typer.Option(help="The address every node binds.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="The head's port (0: a free one).")
    ] = 0,
    cpus: Annotated[int, typer.Option(min=1, max=1024, help="Logical CPUs per node.")] = 4,
    memory: Annotated[str, typer.Option(help="Logical memory per node (8Gi, 512Mi).")] = "8Gi",
    timeout: Annotated[
        float, typer.Option(min=1, help="Seconds to wait for every node to join.")
    ] = 120.0,
    output: Annotated[
        OutputFormat,
        typer.Option("-o", "--output", help="After the address line: a table or one JSON line."),
    ] = OutputFormat.table,
) -> None:
    """Start a local Ray cluster: a head plus one raylet per node, until Ctrl-C or SIGTERM.

    The first output line is the address (HOST:PORT, HOST being ``--host``), printed once
    every node has joined. On exit it stops exactly the processes it started. Ray binds
    more addresses than ``--host`` (docs/ray.md).
    """
    from hetsched.ray.local import LocalCluster, LocalClusterError

    specs, memory_mib = _parse(nodes, memory)
    stop = stop_on_signals()
    cluster = LocalCluster(
        specs,
        host=host,
        port=port,
        cpus=cpus,
        memory_mib=memory_mib,
        fake_devices=fake_devices,
        ready_timeout_s=timeout,
    )
    try:
        with _err.status("starting Ray") as status:
            address = cluster.start(progress=lambda line: status.update(line))
    except (LocalClusterError, OSError) as exc:
        fail(f"cannot start the cluster: {exc}")
    sys.stdout.write(address + "\n")
    _describe(cluster, output)
    sys.stdout.flush()
    if not _watch(cluster, stop):
        raise typer.Exit(1)


def _parse(nodes: str, memory: str) -> tuple[list[LocalNodeSpec], int]:
    """``--nodes`` and ``--memory`` (in MiB); exits with status 2 when one is wrong (the
    memory below 256Mi)."""
    from hetsched.ray.local import parse_nodes

    try:
        specs = parse_nodes(nodes)
    except ValueError as exc:
        fail(str(exc), 2)
    try:
        memory_mib = parse_memory(memory)
    except QuantityError as exc:
        fail(f"--memory: {exc}", 2)
    if memory_mib < 256:
        fail(f"--memory: at least 256Mi per node, got {memory}", 2)
    return specs, memory_mib


def _watch(cluster: LocalCluster, stop: threading.Event) -> bool:
    """Say which nodes stop, until ``stop`` is set or the head is gone; then stop the
    cluster. False when the head went away on its own."""
    gone: set[str] = set()
    try:
        while not stop.wait(1.0):
            for name, code in cluster.exited().items():
                if name not in gone:
                    gone.add(name)
                    _err.print(f"node {name} stopped (ray start exited with {code})")
            if "head" in gone:
                break
    finally:
        killed = cluster.stop()
        _err.print(f"stopped the cluster ({len(killed)} processes had to be killed)")
    return "head" not in gone


def _describe(cluster: object, output: OutputFormat) -> None:
    from hetsched.ray.local import LocalCluster

    assert isinstance(cluster, LocalCluster)
    rows = [
        {
            "name": spec.name,
            "model": spec.model,
            "gpus": spec.gpus,
            "ray_node_id": cluster.node_ids.get(spec.name, ""),
            "pid": cluster.pids().get(spec.name),
        }
        for spec in cluster.nodes
    ]
    if output is OutputFormat.json:
        import json

        document = {"address": cluster.address, "workdir": str(cluster.workdir), "nodes": rows}
        sys.stdout.write(json.dumps(document) + "\n")
        return
    # a Ray node id is long: on a narrow terminal its column is left out, never cut
    columns = (
        Col("node", keep=True),
        Col("gpus", keep=True),
        Col("ray node id", drop=1),
        Col("ray start pid", drop=2, right=True),
    )
    grid = Grid(f"Ray cluster at {cluster.address}", columns)
    for row in rows:
        gpus = f"{row['gpus']}x {row['model']}" if row["model"] else "-"
        grid.add(str(row["name"]), gpus, str(row["ray_node_id"]), str(row["pid"]))
    print_table(grid)
