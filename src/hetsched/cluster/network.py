"""Network domains of a cluster and their free capacity, kept as tasks come and go.

The tree comes from the cluster's levels (node labels, broadest first; see
:mod:`hetsched.model.topology`): at each level every node belongs to one domain, numbered
0..D-1, nested in one domain of the level above. A node without a level's label is a
domain by itself there and at every narrower level, so depths may differ across the tree.

Per level, the free capacity of each domain (:data:`COLUMNS`) is the sum of its nodes'
and changes with them: :meth:`Network.touch` adds one row's change to its domain at each
level (a few small array additions per allocation or release, never a pass over the
nodes). The whole-device columns count, per node, how many tasks of 1, 2, 4 or 8 whole
devices its wholly free healthy slots hold, so a domain's sum bounds how many such tasks
it holds from above, node boundaries included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from hetsched.model.device import SHARE_UNITS, Node
from hetsched.model.job import TaskRequest
from hetsched.model.topology import HOST

if TYPE_CHECKING:
    from hetsched.cluster.state import ClusterState

__all__ = ["COLUMNS", "Network", "domains_of", "fit_count"]

IntArray = npt.NDArray[np.int64]

#: free capacity per domain: cpu, memory, device share, then tasks of 1, 2, 4, 8 whole devices
COLUMNS = ("cpu", "memory", "share", "whole1", "whole2", "whole4", "whole8")
_WHOLE = (1, 2, 4, 8)
#: more tasks than any request asks for at once
_MANY = np.int64(1 << 40)


class Network:
    """The domains of ``levels`` over a cluster state's rows (see the module docstring)."""

    def __init__(self, levels: Sequence[str], nodes: Sequence[Node]) -> None:
        self.levels = tuple(levels)
        #: per level: row -> domain
        self.of: list[IntArray] = []
        #: per level: domain -> name (a label's value, or the node's name when it has none)
        self.names: list[list[str]] = []
        #: per level: domain -> its domain at the level above (all 0 at the broadest)
        self.parent: list[IntArray] = []
        lone = [False] * len(nodes)
        for depth, label in enumerate(self.levels):
            ids: dict[tuple[int, str], int] = {}
            names: list[str] = []
            parents: list[int] = []
            row_of = np.zeros(len(nodes), np.int64)
            above = self.of[depth - 1] if depth else row_of
            for row, node in enumerate(nodes):
                value = node.labels.get(label)
                lone[row] = lone[row] or value is None
                # a labelled domain is its value inside its parent; a lone node is its own
                key = (-1 - row, "") if lone[row] else (int(above[row]), str(value))
                found = ids.get(key)
                if found is None:
                    found = ids[key] = len(names)
                    names.append(node.name if lone[row] else str(value))
                    parents.append(int(above[row]))
                row_of[row] = found
            self.of.append(row_of)
            self.names.append(names)
            self.parent.append(np.array(parents, np.int64))
        self._members = [
            _grouped(row_of, len(names)) for row_of, names in zip(self.of, self.names, strict=True)
        ]
        self._kids = [
            _grouped(parent, len(self.names[depth - 1]) if depth else 1)
            for depth, parent in enumerate(self.parent)
        ]
        width = len(COLUMNS)
        self.free: list[IntArray] = [np.zeros((len(n), width), np.int64) for n in self.names]
        self.rows = np.zeros((len(nodes), len(COLUMNS)), np.int64)
        #: the same with every allocation gone (summed at each sync: health and nodes only)
        self.empty = [f.copy() for f in self.free]
        self.empty_rows = self.rows.copy()
        #: the state's ``version`` the capacity was summed at; a newer one sums afresh
        self.version = -1

    @property
    def host(self) -> int:
        """The depth of the implicit last level, the host (one node per domain)."""
        return len(self.levels)

    def depth(self, label: str) -> int | None:
        """The level's index (0: the broadest; :attr:`host` for the hostname label), or
        None when the cluster has no such level."""
        if label == HOST:
            return self.host
        return self.levels.index(label) if label in self.levels else None

    def label(self, depth: int) -> str:
        return HOST if depth == self.host else self.levels[depth]

    def size(self, depth: int) -> int:
        return len(self.rows) if depth == self.host else len(self.names[depth])

    def name(self, depth: int, domain: int, nodes: Sequence[Node]) -> str:
        return nodes[domain].name if depth == self.host else self.names[depth][domain]

    def domain_of(self, depth: int, row: int) -> int:
        return row if depth == self.host else int(self.of[depth][row])

    def members(self, depth: int, domain: int) -> IntArray:
        """The rows of one domain, in row order."""
        if depth == self.host:
            return np.array([domain], np.int64)
        order, start = self._members[depth]
        return order[start[domain] : start[domain + 1]]

    def kids(self, depth: int, domain: int) -> IntArray:
        """The domains one level narrower inside ``domain`` (``depth`` -1: the whole
        cluster; the narrowest labelled level's kids are its rows)."""
        if depth == self.host - 1:
            return self.members(depth, domain)
        order, start = self._kids[depth + 1]
        return order[start[domain] : start[domain + 1]]

    def ancestors(self, depth: int, up: int) -> IntArray:
        """For every domain at ``depth``, its domain at the broader level ``up`` (-1: the
        whole cluster, domain 0; ``depth`` itself: each its own)."""
        if up < 0:
            return np.zeros(self.size(depth), np.int64)
        if up >= depth:
            return np.arange(self.size(depth), dtype=np.int64)
        if depth == self.host:
            out, level = self.of[depth - 1].copy(), depth - 1
        else:
            out, level = np.arange(self.size(depth), dtype=np.int64), depth
        while level > up:
            out = self.parent[level][out]
            level -= 1
        return out

    # -- free capacity -------------------------------------------------------------------

    def sync(self, state: ClusterState) -> None:
        """Sum every domain's free capacity afresh when the state's nodes or health moved."""
        if self.version == state.version:
            return
        every = np.arange(len(state.nodes), dtype=np.int64)
        self.rows = _row_values(state, every)
        self.empty_rows = _row_values(state, every, empty=True)
        sizes = [len(names) for names in self.names]
        self.free = [_summed(of, self.rows, n) for of, n in zip(self.of, sizes, strict=True)]
        self.empty = [_summed(of, self.empty_rows, n) for of, n in zip(self.of, sizes, strict=True)]
        self.version = state.version

    def touch(self, state: ClusterState, row: int) -> None:
        """One row's free capacity changed (an allocation or release): add the change to
        its domains (the values :func:`_row_values` gives, as plain integers)."""
        if self.version != state.version:
            return  # summed afresh at the next read
        if state.active.item(row):
            whole = state.dev_whole_free.item(row)
            new = np.array(
                (
                    state.cpu_free.item(row),
                    state.mem_free.item(row),
                    state.dev_free_total.item(row),
                    whole,
                    whole >> 1,
                    whole >> 2,
                    whole >> 3,
                ),
                np.int64,
            )
        else:
            new = np.zeros(len(COLUMNS), np.int64)
        delta = new - self.rows[row]
        self.rows[row] = new
        for depth, row_of in enumerate(self.of):
            self.free[depth][row_of.item(row)] += delta

    def capacity(self, state: ClusterState, depth: int, request: TaskRequest) -> IntArray:
        """Per domain at ``depth``: an upper bound on how many tasks of ``request`` it holds
        now (exact for whole-device tasks of 1, 2, 4 or 8 devices whose nodes' CPU and
        memory do not bind)."""
        self.sync(state)
        return fit_count(self.rows if depth == self.host else self.free[depth], request)

    def capacity_empty(self, state: ClusterState, depth: int, request: TaskRequest) -> IntArray:
        """:meth:`capacity` with every task gone (healthy devices and active nodes only): a
        domain below what a job needs can never hold it while the cluster stays as it is."""
        self.sync(state)
        return fit_count(self.empty_rows if depth == self.host else self.empty[depth], request)

    def copy(self) -> Network:
        other = object.__new__(Network)
        other.__dict__.update(self.__dict__)
        other.free = [f.copy() for f in self.free]
        other.rows = self.rows.copy()
        return other


def domains_of(state: ClusterState, node: str) -> dict[str, str]:
    """A node's domain at each level, by level label (what drivers show of a placement)."""
    net = state.network()
    if net is None:
        return {}
    row = state.row(node)
    return {label: net.names[d][int(net.of[d][row])] for d, label in enumerate(net.levels)}


def fit_count(free: IntArray, request: TaskRequest) -> IntArray:
    """Per row of ``free`` (columns :data:`COLUMNS`): how many tasks of ``request`` its
    capacity bounds."""
    out = np.full(len(free), _MANY, np.int64)
    if request.cpu_milli > 0:
        out = np.minimum(out, free[:, 0] // request.cpu_milli)
    if request.memory_mib > 0:
        out = np.minimum(out, free[:, 1] // request.memory_mib)
    for device in request.devices:
        best = np.zeros(len(free), np.int64)
        for choice in device.choices:
            if choice.whole:
                count = choice.count
                column = 3 + max(i for i, k in enumerate(_WHOLE) if k <= count)
                bound = np.minimum(free[:, column], free[:, 3] // count)
            else:
                bound = free[:, 2] // choice.share
            best = np.maximum(best, bound)
        out = np.minimum(out, best)
    return out


def _summed(row_of: IntArray, values: IntArray, domains: int) -> IntArray:
    out = np.zeros((domains, values.shape[1]), np.int64)
    np.add.at(out, row_of, values)
    return out


def _row_values(state: ClusterState, rows: IntArray, empty: bool = False) -> IntArray:
    """Each row's :data:`COLUMNS` now, or with nothing allocated (``empty``)."""
    if empty:
        healthy = (state.dev_healthy[rows] & (state.dev_kind[rows] >= 0)).sum(axis=1)
        whole = healthy.astype(np.int64)
        columns = [state.cpu_cap[rows], state.mem_cap[rows], whole * SHARE_UNITS]
    else:
        whole = state.dev_whole_free[rows]
        columns = [state.cpu_free[rows], state.mem_free[rows], state.dev_free_total[rows]]
    columns += [whole // k for k in _WHOLE]
    values = np.stack(columns, axis=1)
    values[~state.active[rows]] = 0
    return values


def _grouped(keys: IntArray, groups: int) -> tuple[IntArray, IntArray]:
    """Rows sorted by their key (stable) and where each key's run starts."""
    order = np.argsort(keys, kind="stable").astype(np.int64)
    start = np.zeros(groups + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=groups), out=start[1:])
    return order, start
