"""What happened to a job, told from its transitions: the job that preempted it last (name,
user, priority, when) and the device whose loss displaced it last (which, why, when), for
``why`` and the dashboard."""

from __future__ import annotations

import re
from typing import Any

from hetsched.controlplane.storage.store import Store

__all__ = ["story"]

_PREEMPTED = re.compile(r"^preempted by (j[0-9a-f]+)")
_DEVICE = re.compile(r"^device (\S+) ([^;]*)")


def story(store: Store, history: list[dict[str, Any]]) -> dict[str, Any]:
    """``preempted_by`` and ``displaced_by`` from the job's transitions (oldest first);
    None where it never happened."""
    preempted: dict[str, Any] | None = None
    displaced: dict[str, Any] | None = None
    for t in history:
        cause = str(t.get("cause") or "")
        if (match := _PREEMPTED.match(cause)) is not None:
            preempted = {"id": match.group(1), "time": t["time"]}
        elif (match := _DEVICE.match(cause)) is not None:
            displaced = {"device": match.group(1), "reason": match.group(2), "time": t["time"]}
    if preempted is not None:
        row = store.job(preempted["id"])
        if row is not None:
            preempted |= {"name": row["name"], "user": row["owner"], "priority": row["priority"]}
    return {"preempted_by": preempted, "displaced_by": displaced}
