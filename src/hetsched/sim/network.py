"""The simulator's network cost: a gang runs slower the broader the narrowest network domain
that holds all of its tasks.

``NetworkCost(levels, factors)``: the cluster's levels (node labels, broadest first; see
:mod:`hetsched.model.topology`) and the speed factor per level, by label, with ``host`` for
tasks all on one node and ``across`` for tasks in more than one domain of the broadest
level. A task of a job whose tasks span a rack runs at the rack's factor: its duration is
divided by it. A level without a factor runs at the next narrower one's (the host's 1.0 at
the narrowest).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hetsched.cluster.network import Network
from hetsched.cluster.placement import Placement
from hetsched.model.device import Node
from hetsched.model.topology import short_level

__all__ = ["ACROSS", "DEFAULT_FACTORS", "HOST_LEVEL", "NetworkCost", "Slowdown"]

HOST_LEVEL = "host"
ACROSS = "across"
#: by a level's short name (its label's last segment): the issue's example figures
DEFAULT_FACTORS: Mapping[str, float] = {
    HOST_LEVEL: 1.0,
    "nvlink-domain": 1.0,
    "rack": 0.9,
    "block": 0.75,
    ACROSS: 0.5,
}


@dataclass(frozen=True, slots=True)
class NetworkCost:
    levels: tuple[str, ...]
    #: speed factor (0 < f <= 1) by level label or short name, ``host`` and ``across``
    factors: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_FACTORS))

    def __post_init__(self) -> None:
        for name, value in self.factors.items():
            if not 0 < value <= 1:
                raise ValueError(f"network factor {name}: must be in (0, 1], got {value}")

    def factor_of(self, label: str) -> float | None:
        found = self.factors.get(label)
        return self.factors.get(short_level(label)) if found is None else found


class Slowdown:
    """The speed factor of a gang from where its tasks run (see the module docstring)."""

    def __init__(self, cost: NetworkCost, nodes: Sequence[Node]) -> None:
        self.net = Network(cost.levels, nodes)
        self.rows = {node.name: row for row, node in enumerate(nodes)}
        factors = [cost.factors.get(HOST_LEVEL, 1.0)]
        for label in reversed(cost.levels):
            found = cost.factor_of(label)
            factors.append(factors[-1] if found is None else found)
        #: narrowest first: host, the narrowest level, ..., the broadest level
        self.by_depth = factors
        self.across = cost.factors.get(ACROSS, factors[-1])
        #: gangs of more than one node by the narrowest level that held them (``across``)
        self.spans: Counter[str] = Counter()

    def level(self, placements: Sequence[Placement]) -> int | None:
        """The depth of the narrowest domain holding every placement (the host's depth
        when all share a node), None when they span the broadest level's domains."""
        rows = {self.rows[p.node] for p in placements}
        if len(rows) <= 1:
            return self.net.host
        for depth in range(self.net.host - 1, -1, -1):
            if len({int(self.net.of[depth][row]) for row in rows}) == 1:
                return depth
        return None

    def factor(self, placements: Sequence[Placement]) -> float:
        """The gang's speed factor; counts it in :attr:`spans` when it spans nodes."""
        depth = self.level(placements)
        if depth != self.net.host:
            self.spans[ACROSS if depth is None else short_level(self.net.levels[depth])] += 1
        if depth is None:
            return self.across
        return self.by_depth[self.net.host - depth]
