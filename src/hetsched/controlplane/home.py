"""Where a control plane keeps its state by default: ``$XDG_DATA_HOME/hetsched`` (a
federation's under ``federation/`` there)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_home"]


def default_home() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return Path(base) / "hetsched"
