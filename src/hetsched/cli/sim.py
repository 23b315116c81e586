"""``hetsched sim``: the simulator's commands, each imported when it runs."""

from __future__ import annotations

from typing import Any, ClassVar

import typer

from hetsched.cli.main import LazyGroup

__all__ = ["sim_app"]


class _SimCommands(LazyGroup):
    lazy: ClassVar[dict[str, tuple[str, str, dict[str, Any]]]] = {
        "replay": ("hetsched.cli.sim_replay", "replay", {}),
        "synth": ("hetsched.cli.sim_synth", "synth", {}),
        "openb": ("hetsched.cli.sim_openb", "openb", {}),
        "gavel": ("hetsched.cli.sim_gavel", "gavel", {}),
        "topology": ("hetsched.cli.sim_topology", "topology", {}),
    }


sim_app = typer.Typer(
    help="Simulate: replay traces against scheduling policies on a virtual clock.",
    no_args_is_help=True,
    cls=_SimCommands,
)
