"""fifo: jobs in submission order.

Points: queue_sort. Args: none. Ties (same submit time) keep arrival order.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from pydantic import BaseModel

from hetsched.framework.registry import register

__all__ = ["Fifo"]


@register("fifo")
class Fifo:
    """Submission order."""

    name = "fifo"

    def __init__(self, args: BaseModel | None = None, handle: Any = None) -> None:
        pass

    def sort_key(self, job: Any, now: float) -> tuple[Hashable, ...]:
        return (job.job.submit_time, job.seq)
