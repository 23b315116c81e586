"""The ``hetsched`` command. Each command group lives in its own module."""

from __future__ import annotations

import typer

from hetsched import __version__
from hetsched.cli.check import check
from hetsched.cli.checkpoint import checkpoint, progress
from hetsched.cli.cluster import nodes, queues
from hetsched.cli.devices import devices
from hetsched.cli.federation import federation_app
from hetsched.cli.jobs import cancel, job, jobs, logs, submit, why
from hetsched.cli.k8s import k8s_app
from hetsched.cli.place import place
from hetsched.cli.ray import ray_app
from hetsched.cli.sim_gavel import gavel
from hetsched.cli.sim_openb import openb
from hetsched.cli.sim_replay import replay, synth
from hetsched.cli.tokens import token_app
from hetsched.cli.up import up

__all__ = ["app", "main"]

app = typer.Typer(
    name="hetsched",
    help="Schedule AI work on heterogeneous hardware: CPUs, GPUs of many models, FPGAs, NPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(place)
app.command()(check)
app.command()(up)
app.command(context_settings={"allow_interspersed_args": False})(submit)
app.command()(jobs)
app.command()(job)
app.command()(logs)
app.command()(cancel)
app.command()(why)
app.command()(checkpoint)
app.command()(progress)
app.command()(nodes)
app.command()(queues)
app.command()(devices)
app.add_typer(token_app, name="token")
app.add_typer(k8s_app, name="k8s")
app.add_typer(ray_app, name="ray")
app.add_typer(federation_app, name="federation")

sim_app = typer.Typer(
    help="Simulate: replay traces against scheduling policies on a virtual clock.",
    no_args_is_help=True,
)
app.add_typer(sim_app, name="sim")
sim_app.command("replay")(replay)
sim_app.command("synth")(synth)
sim_app.command("openb")(openb)
sim_app.command("gavel")(gavel)


@app.command()
def version() -> None:
    """Print the hetsched version."""
    typer.echo(__version__)


def main() -> None:
    app()
