"""The ``hetsched`` command. Each command group lives in its own module.

Commands are imported when they run, not at start: ``hetsched place`` should not pay for
the service, the simulator, Kubernetes and Ray (a fifth of a 5,000-job ``place`` run went to
importing them). ``--help`` imports every command, to show its summary.
"""

from __future__ import annotations

import gc
import importlib
import inspect
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, Any, ClassVar

import typer
from typer.core import TyperGroup

from hetsched import __version__
from hetsched.cli.help_layout import install as _install_help_layout

__all__ = ["app", "main", "reflow"]

# at 80 columns typer's help cut long option names (--max-gpus-per-ta…)
_install_help_layout()

#: command name -> (module, attribute, context settings), in the order ``--help`` lists them;
#: the attribute is a command function or a ``typer.Typer`` group
_COMMANDS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "place": ("hetsched.cli.place", "place", {}),
    "check": ("hetsched.cli.check", "check", {}),
    "up": ("hetsched.cli.up", "up", {}),
    "submit": ("hetsched.cli.submit", "submit", {"allow_interspersed_args": False}),
    "jobs": ("hetsched.cli.jobs", "jobs", {}),
    "job": ("hetsched.cli.jobs", "job", {}),
    "logs": ("hetsched.cli.jobs", "logs", {}),
    "cancel": ("hetsched.cli.cancel", "cancel", {}),
    "why": ("hetsched.cli.jobs", "why", {}),
    "checkpoint": ("hetsched.cli.checkpoint", "checkpoint", {}),
    "progress": ("hetsched.cli.checkpoint", "progress", {}),
    "nodes": ("hetsched.cli.cluster", "nodes", {}),
    "queues": ("hetsched.cli.cluster", "queues", {}),
    "devices": ("hetsched.cli.devices", "devices", {}),
    "version": ("hetsched.cli.main", "version", {}),
    "token": ("hetsched.cli.tokens", "token_app", {}),
    "store": ("hetsched.cli.store", "store_app", {}),
    "history": ("hetsched.cli.history", "history_app", {}),
    "k8s": ("hetsched.cli.k8s", "k8s_app", {}),
    "ray": ("hetsched.cli.ray", "ray_app", {}),
    "federation": ("hetsched.cli.federation", "federation_app", {}),
    "sim": ("hetsched.cli.sim", "sim_app", {}),
}


#: commands that run one pass in this process and start no other: numpy's BLAS (OpenBLAS)
#: starts a thread per core when numpy is imported, which they never use (the core's
#: arrays are vectors, not matrices): about 50 ms of a ``place`` run's start on 2 cores
_ONE_BLAS_THREAD = frozenset({"place"})


@contextmanager
def _one_blas_thread() -> Iterator[None]:
    """Import numpy with one BLAS thread, unless the user chose a number: only while the
    command's modules are imported, so nothing started later inherits the setting."""
    if "OPENBLAS_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


#: True while main holds the collector paused for the start (load_command resumes it)
_start_paused = False

#: commands that build what they use once and then end: run by main (named first on its
#: command line), the collector stays paused from the start to the end (main freezes
#: everything then), since all it would do meanwhile is walk objects that are still alive
#: (a tenth of a 5,000-job ``place``)
_ONE_SHOT = frozenset({"place"})

#: True while the collector is paused for a one-shot command run by main (main resumes it)
_held_to_end = False


def load_command(name: str, module: str, attribute: str, settings: dict[str, Any]) -> Any:
    """The click command of ``module.attribute`` under ``name``, built as typer builds it
    (typed Any: which click typer builds on, its own copy or the package, depends on its
    version)."""
    # importing builds tens of thousands of objects that all live to the end (classes,
    # functions, pydantic validators): the cyclic collector would only walk them again and
    # again, a tenth of a short command's start-up
    global _start_paused
    paused = gc.isenabled() or _start_paused
    _start_paused = False
    gc.disable()
    try:
        with _one_blas_thread() if name in _ONE_BLAS_THREAD else nullcontext():
            target = getattr(importlib.import_module(module), attribute)
    finally:
        if paused and not _held_to_end:
            gc.enable()
    if isinstance(target, typer.Typer):
        command: Any = typer.main.get_group(target)
    else:
        single = typer.Typer(add_completion=False)
        single.command(name, context_settings=settings or None)(target)
        command = typer.main.get_command(single)
    command.name = name
    _reflow_help(command)
    return command


def _reflow_help(command: Any) -> None:
    """Make ``command``'s help, its options' and its subcommands' read as prose at any
    width (once per command: a verbatim block loses its mark). Docstrings are wrapped for
    the source, and typer's rich help keeps every line break of a paragraph after the
    first, so at 80 columns each source line ended in a stub; joined, rich wraps them to
    the terminal."""
    if getattr(command, "_reflowed", False):
        return
    command._reflowed = True
    if command.help:
        command.help = reflow(command.help)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = reflow(param.help)
    for sub in getattr(command, "commands", {}).values():
        _reflow_help(sub)


def reflow(text: str) -> str:
    """``text`` with each paragraph on one line, paragraphs apart by a blank line.

    A verbatim block (examples) keeps its lines: a paragraph whose lines are all indented,
    or that starts with ``\\b`` (click's mark, dropped here: rich help would print it as
    a blank line). Double backquotes, the docstrings' literal markup, show as single ones.
    What follows a form feed (what click keeps out of ``--help``) is left as it is.
    """
    body, feed, rest = inspect.cleandoc(text).partition("\f")
    paragraphs: list[str] = []
    for paragraph in body.strip().split("\n\n"):
        lines = paragraph.splitlines()
        if paragraph.startswith("\b"):
            paragraphs.append(paragraph.removeprefix("\b").strip("\n"))
        elif all(line[:1].isspace() for line in lines):
            paragraphs.append(paragraph)
        else:
            paragraphs.append(" ".join(line.strip() for line in lines))
    tail = body[len(body.rstrip()) :] if feed else ""
    return "\n\n".join(paragraphs).replace("``", "`") + tail + feed + rest


class LazyGroup(TyperGroup):
    """A typer group that imports a command's module the first time the command is looked
    up; ``lazy`` maps names to (module, attribute, context settings)."""

    lazy: ClassVar[dict[str, tuple[str, str, dict[str, Any]]]] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        return [*self.lazy, *(name for name in self.commands if name not in self.lazy)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        if command is None and cmd_name in self.lazy:
            command = self.commands[cmd_name] = load_command(cmd_name, *self.lazy[cmd_name])
        return command

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in self.commands and args[0] not in self.lazy:
            # an unknown name: load every command, so typer's "did you mean" sees them all
            for name in self.lazy:
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)


class _Commands(LazyGroup):
    lazy = _COMMANDS


app = typer.Typer(
    name="hetsched",
    help="Schedule AI work on heterogeneous hardware: CPUs, GPUs of many models, FPGAs, NPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_Commands,
)


_CaCert = Annotated[
    Path | None,
    typer.Option(
        "--cacert",
        envvar="HETSCHED_CA",
        help="CA bundle (PEM) that the service's https:// certificate is verified with "
        "(default: the system's trust store).",
    ),
]
_ClientCert = Annotated[
    Path | None,
    typer.Option(
        "--client-cert",
        envvar="HETSCHED_CLIENT_CERT",
        help="Client certificate (PEM) for a service started with --tls-client-ca.",
    ),
]
_ClientKey = Annotated[
    Path | None,
    typer.Option(
        "--client-key", envvar="HETSCHED_CLIENT_KEY", help="The client certificate's key."
    ),
]


@app.callback()
def _root(
    cacert: _CaCert = None, client_cert: _ClientCert = None, client_key: _ClientKey = None
) -> None:
    # what every command's client reads (hetsched.tls): the options become its variables
    for name, value in (
        ("HETSCHED_CA", cacert),
        ("HETSCHED_CLIENT_CERT", client_cert),
        ("HETSCHED_CLIENT_KEY", client_key),
    ):
        if value is not None:
            os.environ[name] = str(value)


def version() -> None:
    """Print the hetsched version."""
    typer.echo(__version__)


def main() -> None:
    global _start_paused, _held_to_end
    # typer's start imports pydantic and builds the command line's parameters, objects
    # that live to the end: the collector waits until the command is loaded, as it does
    # while the command's modules are imported
    if gc.isenabled():
        gc.disable()
        _start_paused = True
        _held_to_end = sys.argv[1:2] != [] and sys.argv[1] in _ONE_SHOT
    try:
        app()
    finally:
        if _start_paused:  # no command was loaded (an error, --help): as it was
            _start_paused = False
            gc.enable()
        # The process ends now. Python's shutdown runs one last full collection, which
        # walks (and frees, one by one) everything the command built: a fifth of a
        # 5,000-job ``place``. Frozen objects are left to the operating system instead;
        # exit handlers still run and files are still flushed.
        gc.freeze()
        if _held_to_end:  # a one-shot command's pause ends with the process
            _held_to_end = False
            gc.enable()
