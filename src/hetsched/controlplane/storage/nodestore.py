"""The ``nodes`` table: the cluster's nodes as the service saw them join and leave, kept
for ``hetsched history export`` (the cluster a replay of the history runs on).

A node that joins again keeps its first join time and its place, and loses its leave time;
its entry is replaced by what it is now (a node that came back with other devices is
replayed with those). The place is the node's in the scheduler's order (ties between equal
nodes go to the first), so a replay adds the nodes in that order. Written by the service at
its start and on every node change it is told of.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection, func, select, update

from hetsched.controlplane.storage.tables import nodes
from hetsched.model.cluster_spec import node_entry
from hetsched.model.device import Node

__all__ = ["NodeRecords"]


class NodeRecords:
    """Reads and writes of the nodes' records (a part of Store, which provides the
    connections)."""

    def write(self) -> AbstractContextManager[Connection]:  # provided by Store
        raise NotImplementedError

    def read(self) -> AbstractContextManager[Connection]:  # provided by Store
        raise NotImplementedError

    def record_node_changes(self, joined: Sequence[Node], left: Sequence[str], now: float) -> None:
        """The nodes that joined and left in one turn."""
        self.record_joined(joined, now)
        self.record_left(left, now)

    def record_joined(self, joined: Sequence[Node], now: float) -> None:
        """Record nodes that are there now, in one transaction: a new one after every other
        (the scheduler adds it last), a known one keeping its place, with its entry replaced and
        its leave time cleared."""
        if not joined:
            return
        with self.write() as conn:
            known = {
                name
                for (name,) in conn.execute(
                    select(nodes.c.name).where(nodes.c.name.in_([n.name for n in joined]))
                )
            }
            last = conn.execute(select(func.max(nodes.c.position))).scalar()
            position = -1 if last is None else int(last)
            for node in joined:
                values = {"entry": node_entry(node), "device_ids": [d.id for d in node.devices]}
                if node.name in known:
                    conn.execute(
                        update(nodes)
                        .where(nodes.c.name == node.name)
                        .values(left_at=None, **values)
                    )
                else:
                    position += 1
                    conn.execute(
                        nodes.insert().values(
                            name=node.name, joined_at=now, position=position, **values
                        )
                    )

    def record_left(self, names: Sequence[str], now: float) -> None:
        """Record that nodes left (those not recorded are ignored)."""
        if not names:
            return
        with self.write() as conn:
            conn.execute(
                update(nodes)
                .where(nodes.c.name.in_(list(names)), nodes.c.left_at.is_(None))
                .values(left_at=now)
            )

    def node_history(self) -> list[dict[str, Any]]:
        """Every recorded node (name, entry, device_ids, position, joined_at, left_at), in the
        scheduler's order."""
        with self.read() as conn:
            rows = conn.execute(select(nodes).order_by(nodes.c.position)).all()
        return [dict(r._mapping) for r in rows]

    def record_nodes_at_start(self, present: Sequence[Node], now: float) -> None:
        """At a start: the nodes there now joined, in the scheduler's order (``present``'s),
        and recorded nodes not among them left (placed after them)."""
        names = [n.name for n in present]
        gone = [row["name"] for row in self.node_history() if row["name"] not in set(names)]
        self.record_left(gone, now)
        self.record_joined(present, now)
        with self.write() as conn:
            for position, name in enumerate([*names, *gone]):
                conn.execute(update(nodes).where(nodes.c.name == name).values(position=position))
