"""What the federation keeps besides the service's tables: where each dispatch went, and
each member's last inventory.

The federation uses the service's store as it is (jobs, transitions, tokens, tasks; SQLite
by default, PostgreSQL when given a URL), with one row in ``tasks`` per dispatch: the task
of the federation's core (one per job run), ``node`` the member, and in ``placement`` the
member's job id once the member has accepted it (``member_job``,
``Store.record_remote_start``).

Inventories (a member's nodes, its lapse count and how long its tasks may outlive a lapsed
lease) are small JSON files under ``<home>/members/``: written before a member's first
dispatch, read at start so that jobs running on a member can be restored on it before it
answers again. A lost write only delays a restore.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Inventory", "read_inventory", "write_inventory"]


@dataclass(frozen=True, slots=True)
class Inventory:
    """A member as last seen: its core node's incarnation, its nodes (their view), its
    lapse count, and how long its tasks may outlive a lapsed lease."""

    incarnation: int
    nodes: list[dict[str, Any]]
    lapses: int
    fence_after_s: float


def _path(home: Path, member: str) -> Path:
    return home / "members" / f"{member}.json"


def write_inventory(home: Path, member: str, inventory: Inventory) -> None:
    path = _path(home, member)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(path.name + ".tmp")
    data = {
        "incarnation": inventory.incarnation,
        "nodes": inventory.nodes,
        "lapses": inventory.lapses,
        "fence_after_s": inventory.fence_after_s,
    }
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
    os.replace(temporary, path)


def read_inventory(home: Path, member: str) -> Inventory | None:
    try:
        data = json.loads(_path(home, member).read_text())
        return Inventory(
            int(data["incarnation"]),
            list(data["nodes"]),
            int(data["lapses"]),
            float(data["fence_after_s"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
