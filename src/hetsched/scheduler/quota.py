"""Hierarchical queues with guaranteed (nominal) quotas, borrowing and lending.

The rule, per flavor ``f`` (only flavors some queue names are limited):

- a queue's *effective nominal* ``N`` is its declared nominal, or, for an inner queue that
  declares none, the sum of its children's;
- a leaf's *demand on its parent* is ``X = max(0, U - N)``: what it uses beyond its guarantee;
- a queue lends its parent ``L = min(lending_limit, max(0, N - U))``: its idle guarantee, up to
  its lending limit (all of it by default);
- an inner queue ``P`` covers its children's demands with what the other children lend plus
  its own unassigned nominal ``h = max(0, N_declared - sum of children's N)``; what is left is
  its own demand on its parent: ``X(P) = max(0, sum X(c) - sum L(c) - h)``;
- every queue's demand is at most its borrowing limit (unlimited by default), and the roots'
  total demand is at most the cluster capacity that no root's nominal claims.

A job is admitted only if these hold with its usage added. A queue that uses no more than
its guarantee never needs anything from others, so it is always admissible as far as quotas
go; when capacity is physically taken by borrowers, the core reclaims it (see preemption).
A job is *borrowing* when, with it, some queue on its path uses more than its effective
nominal in a flavor the job uses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hetsched.cluster.state import ClusterState
from hetsched.cluster.usage import Ledger, Usage, capacity, request_usage
from hetsched.framework.profile import QueueSpec, flavor_amount
from hetsched.model.job import Job

__all__ = ["QueueNode", "QuotaBlock", "QuotaTree", "describe_amount"]


def describe_amount(flavor: str, amount: float) -> str:
    if flavor == "cpu":
        return f"{amount / 1000:g} cpu"
    if flavor == "memory":
        return f"{amount:g}Mi"
    return f"{amount / 1000:g} {flavor}"


@dataclass(frozen=True, slots=True)
class QuotaBlock:
    """Why quotas refuse a job: which queue and flavor, and the numbers."""

    queue: str
    flavor: str
    need: int
    used: int
    nominal: int
    borrowed: int
    #: how much of ``flavor`` the job could still get through this queue now
    available: int
    limit: str

    def __str__(self) -> str:
        d = describe_amount
        f = self.flavor
        return (
            f"quota: queue {self.queue} {f}: needs {d(f, self.need)}, uses {d(f, self.used)} "
            f"(nominal {d(f, self.nominal)}, borrowed {d(f, self.borrowed)}); "
            f"{d(f, self.available)} available ({self.limit})"
        )


@dataclass(slots=True, eq=False)
class QueueNode:
    name: str
    parent: str | None
    weight: float
    nominal: dict[str, int]
    borrowing_limit: dict[str, int]
    lending_limit: dict[str, int]
    children: list[str] = field(default_factory=list)


def _amounts(values: Mapping[str, str | int | float]) -> dict[str, int]:
    return {flavor: flavor_amount(flavor, value) for flavor, value in values.items()}


class QuotaTree:
    """The queue tree of a profile (validated already) and the quota rule above."""

    def __init__(self, specs: Sequence[QueueSpec]) -> None:
        self.nodes: dict[str, QueueNode] = {
            s.name: QueueNode(
                s.name,
                s.parent,
                s.weight,
                _amounts(s.nominal),
                _amounts(s.borrowing_limit),
                _amounts(s.lending_limit),
            )
            for s in specs
        }
        for node in self.nodes.values():
            if node.parent is not None:
                self.nodes[node.parent].children.append(node.name)
        self.roots = [n.name for n in self.nodes.values() if n.parent is None]
        self.flavors: set[str] = set()
        for node in self.nodes.values():
            self.flavors |= set(node.nominal) | set(node.borrowing_limit)
        # post-order: children before parents
        self._order: list[str] = []
        for root in self.roots:
            self._post(root)

    def _post(self, name: str) -> None:
        for child in self.nodes[name].children:
            self._post(child)
        self._order.append(name)

    @property
    def enabled(self) -> bool:
        return bool(self.nodes)

    def path(self, queue: str) -> list[str]:
        """The queue and its ancestors, leaf first."""
        out = []
        name: str | None = queue
        while name is not None:
            out.append(name)
            name = self.nodes[name].parent
        return out

    def weight(self, queue: str) -> float:
        node = self.nodes.get(queue)
        return node.weight if node is not None else 1.0

    # -- submission ------------------------------------------------------------------------

    def submit_error(self, job: Job, need: Usage | None = None) -> str | None:
        """Why a job can never be admitted: unknown or inner queue, or past a hard limit.
        ``need``: what its gang minimum is charged at least (default: in devices)."""
        if not self.enabled:
            return None
        node = self.nodes.get(job.queue)
        if node is None:
            known = ", ".join(sorted(n for n, q in self.nodes.items() if not q.children))
            return f"unknown queue {job.queue!r} (queues: {known})"
        if node.children:
            return f"queue {job.queue!r} is not a leaf queue; submit to one of its children"
        need = request_usage(job, job.gang_min) if need is None else need
        for name in self.path(job.queue):
            queue = self.nodes[name]
            for flavor, limit in queue.borrowing_limit.items():
                cap = self._nominal(name, flavor) + limit
                if need.get(flavor, 0) > cap:
                    return (
                        f"quota: needs {describe_amount(flavor, need[flavor])} at once but "
                        f"queue {name} may use at most {describe_amount(flavor, cap)} "
                        "(nominal + borrowing limit)"
                    )
        return None

    # -- the rule ----------------------------------------------------------------------------

    def _nominal(self, name: str, flavor: str) -> int:
        node = self.nodes[name]
        if flavor in node.nominal or not node.children:
            return node.nominal.get(flavor, 0)
        return sum(self._nominal(c, flavor) for c in node.children)

    def usage(
        self, ledger: Ledger, extra: Mapping[str, Usage] | None = None, sign: int = 1
    ) -> dict[str, Usage]:
        """Usage per queue (inner queues sum their subtree), with ``extra`` per leaf added
        (``sign=1``) or taken away (``sign=-1``)."""
        out: dict[str, Usage] = {}
        for name in self._order:
            node = self.nodes[name]
            total: Usage = Counter(ledger.by_queue.get(name, {}))
            if extra and name in extra:
                for flavor, amount in extra[name].items():
                    total[flavor] += sign * amount
            for child in node.children:
                total.update(out[child])
            out[name] = total
        return out

    def check(
        self,
        queue: str,
        need: Mapping[str, int],
        ledger: Ledger,
        state: ClusterState,
        minus: Mapping[str, Usage] | None = None,
    ) -> QuotaBlock | None:
        """Would quotas admit ``need`` more in leaf ``queue`` (with ``minus`` per leaf gone)?"""
        if not self.enabled:
            return None
        flavors = [f for f, a in need.items() if a > 0 and f in self.flavors]
        if not flavors:
            return None
        usage = self.usage(ledger, minus, sign=-1)
        path = set(self.path(queue))
        for name in path:
            usage[name] = usage[name] + Counter(need)
        total = capacity(state)
        for flavor in flavors:
            block = self._check_flavor(queue, flavor, need[flavor], usage, path, total)
            if block is not None:
                return block
        return None

    def _check_flavor(
        self,
        queue: str,
        flavor: str,
        need: int,
        usage: Mapping[str, Usage],
        path: set[str],
        total: Mapping[str, int],
    ) -> QuotaBlock | None:
        demand: dict[str, int] = {}
        lends: dict[str, int] = {}
        for name in self._order:
            node = self.nodes[name]
            used = usage[name].get(flavor, 0)
            nominal = self._nominal(name, flavor)
            if node.children:
                own = node.nominal.get(flavor)
                spare = 0
                if own is not None:
                    spare = max(0, own - sum(self._nominal(c, flavor) for c in node.children))
                lent = sum(lends[c] for c in node.children)
                demand[name] = max(0, sum(demand[c] for c in node.children) - lent - spare)
            else:
                demand[name] = max(0, used - nominal)
            lends[name] = min(node.lending_limit.get(flavor, nominal), max(0, nominal - used))
            limit = node.borrowing_limit.get(flavor)
            if name in path and limit is not None and demand[name] > limit:
                return self._block(
                    queue, flavor, need, usage, demand[name] - limit, f"borrowing limit of {name}"
                )
        roots_nominal = sum(self._nominal(r, flavor) for r in self.roots)
        unassigned = max(0, total.get(flavor, 0) - roots_nominal)
        overflow = sum(demand[r] for r in self.roots) - unassigned
        if overflow > 0:
            return self._block(
                queue,
                flavor,
                need,
                usage,
                overflow,
                "guarantees of other queues in use or not lendable",
            )
        return None

    def _block(
        self,
        queue: str,
        flavor: str,
        need: int,
        usage: Mapping[str, Usage],
        short: int,
        limit: str,
    ) -> QuotaBlock:
        used = usage[queue].get(flavor, 0) - need
        nominal = self._nominal(queue, flavor)
        return QuotaBlock(
            queue, flavor, need, used, nominal, max(0, used - nominal), max(0, need - short), limit
        )

    def borrowing(self, queue: str, ledger: Ledger, flavors: set[str]) -> bool:
        """Does some queue on ``queue``'s path use more than its nominal in ``flavors`` now?"""
        if not self.enabled:
            return False
        usage = self.usage(ledger)
        for name in self.path(queue):
            for flavor in flavors & self.flavors:
                if usage[name].get(flavor, 0) > self._nominal(name, flavor):
                    return True
        return False

    def over_nominal(self, queue: str, usage: Mapping[str, Usage]) -> dict[str, int]:
        """Per flavor, how far leaf ``queue`` is above its nominal (only flavors above)."""
        out: dict[str, int] = {}
        for flavor in self.flavors:
            excess = usage[queue].get(flavor, 0) - self._nominal(queue, flavor)
            if excess > 0:
                out[flavor] = excess
        return out

    def nominal(self, queue: str, flavor: str) -> int:
        return self._nominal(queue, flavor)
