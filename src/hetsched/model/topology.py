"""Network topology: the levels a cluster declares and what a job asks of them.

A cluster's **levels** are node labels ordered from the broadest network domain to the
narrowest (``network.hetsched.io/block``, ``network.hetsched.io/rack``,
``network.hetsched.io/nvlink-domain``); the host is always the last, implicit level. A
node without a level's label is a domain by itself at that level and at every narrower
one, so trees of different depths share one cluster.

A job's :class:`TopologyRequest` says ``required`` (all its tasks inside one domain of
that level, else it waits) or ``preferred`` (one domain of that level if any fits, else
as few domains of the broader levels as it can), optionally with slices: groups of
``slice_size`` consecutive tasks, each group inside one domain of ``slice_required``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "HOST",
    "TopologyRequest",
    "short_level",
]

#: the implicit narrowest level: one node (also accepted under Kubernetes' hostname label)
HOST = "kubernetes.io/hostname"


def short_level(label: str) -> str:
    """How explanations name a level: its label's last path segment (``rack``)."""
    if label == HOST:
        return "host"
    return label.rsplit("/", 1)[-1]


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """What a job asks of the network (see the module docstring); exactly one of
    ``required`` and ``preferred`` is set."""

    required: str | None = None
    preferred: str | None = None
    slice_size: int | None = None
    slice_required: str | None = None

    @property
    def level(self) -> str:
        """The level the job names (required or preferred)."""
        return self.required or self.preferred or HOST

    def describe(self) -> str:
        word = "required" if self.required else "preferred"
        text = f"{word} {short_level(self.level)}"
        if self.slice_size is not None and self.slice_required is not None:
            text += f", slices of {self.slice_size} per {short_level(self.slice_required)}"
        return text
