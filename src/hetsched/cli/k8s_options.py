"""The options the ``hetsched k8s`` commands share, as ``Annotated`` aliases, and the checks
of the paths they are given.

Every path option may be relative: it is taken relative to the working directory and made
absolute before anything uses it (a relative path in a ``--config`` file is taken relative
to that file). The node agents serve unix sockets at their paths and hand them to the
kubelet, so a folder that cannot be made, or a socket path longer than the 107 bytes a unix
socket may have, is refused in one line that names the option, never with a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hetsched.cli.output import fail

__all__ = [
    "SOCKET_PATH_MAX",
    "Backend",
    "ConfigFile",
    "FakeFile",
    "Kubeconfig",
    "NodeName",
    "Profile",
    "absolute",
    "check_socket",
    "existing_file",
    "make_dir",
]

#: the longest path of a unix socket (sun_path holds 108 bytes, the last one a NUL)
SOCKET_PATH_MAX = 107

Kubeconfig = Annotated[
    Path | None,
    typer.Option(help="A kubeconfig file (default: in-cluster config, else ~/.kube/config)."),
]
Profile = Annotated[
    Path | None, typer.Option(help="A scheduling profile (YAML); default: the built-in one.")
]
Backend = Annotated[
    str, typer.Option(help="Discovery backends, comma-separated: nvidia, pci, fake.")
]
NodeName = Annotated[
    str | None, typer.Option(help="This node's name (default: $NODE_NAME, hostname).")
]
FakeFile = Annotated[Path | None, typer.Option("--fake", help="The fake backend's device file.")]
ConfigFile = Annotated[Path | None, typer.Option("--config", help="The YAML configuration.")]


def absolute(path: Path | None) -> Path | None:
    """``path`` made absolute against the working directory (``~`` expanded); None stays."""
    return None if path is None else path.expanduser().absolute()


def make_dir(path: Path, option: str) -> None:
    """Make the folder ``path`` (named by ``option``) or refuse in one line."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"{option} {path}: cannot make the folder ({exc.strerror or exc})")


def check_socket(path: Path, option: str) -> None:
    """Refuse, in one line, a socket path a unix socket cannot have."""
    size = len(str(path).encode())
    if size > SOCKET_PATH_MAX:
        fail(
            f"{option}: the socket {path} is {size} bytes long, more than the "
            f"{SOCKET_PATH_MAX} a unix socket may have; choose a shorter folder"
        )


def existing_file(path: Path | None, option: str) -> Path | None:
    """``path`` made absolute, refused in one line when it is not a file."""
    found = absolute(path)
    if found is not None and not found.is_file():
        fail(f"{option} {found}: no such file")
    return found
