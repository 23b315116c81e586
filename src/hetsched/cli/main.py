"""The ``hetsched`` command. Each command group lives in its own module."""

from __future__ import annotations

import typer

from hetsched import __version__
from hetsched.cli.check import check
from hetsched.cli.place import place
from hetsched.cli.sim_replay import replay, synth
from hetsched.cli.sim_openb import openb

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

sim_app = typer.Typer(
    help="Simulate: replay traces against scheduling policies on a virtual clock.",
    no_args_is_help=True,
)
app.add_typer(sim_app, name="sim")
sim_app.command("replay")(replay)
sim_app.command("synth")(synth)
sim_app.command("openb")(openb)


@app.command()
def version() -> None:
    """Print the hetsched version."""
    typer.echo(__version__)


def main() -> None:
    app()
