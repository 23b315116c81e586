"""The ``nodes`` table: the cluster's nodes as the service saw them join and leave, kept
for ``hetsched history export`` (the cluster a replay of the history runs on).

A node that joins again keeps its first join time and loses its leave time; its entry is
replaced by what it is now (a node that came back with other devices is replayed with
those). Written by the service at its start and on every node change it is told of.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update

from hetsched.controlplane.storage.tables import nodes
from hetsched.model.cluster_spec import node_entry
from hetsched.model.device import Node

if TYPE_CHECKING:
    from hetsched.controlplane.storage.store import Store

__all__ = ["node_history", "record_joined", "record_left", "record_start"]


def record_joined(store: Store, joined: Sequence[Node], now: float) -> None:
    """Record nodes that are there now (inserted, or their entry replaced and their leave
    time cleared), in one transaction."""
    if not joined:
        return
    with store.write() as conn:
        known = {
            name
            for (name,) in conn.execute(
                select(nodes.c.name).where(nodes.c.name.in_([n.name for n in joined]))
            )
        }
        for node in joined:
            values = {"entry": node_entry(node), "device_ids": [d.id for d in node.devices]}
            if node.name in known:
                conn.execute(
                    update(nodes).where(nodes.c.name == node.name).values(left_at=None, **values)
                )
            else:
                conn.execute(nodes.insert().values(name=node.name, joined_at=now, **values))


def record_left(store: Store, names: Sequence[str], now: float) -> None:
    """Record that nodes left (those not recorded are ignored)."""
    if not names:
        return
    with store.write() as conn:
        conn.execute(
            update(nodes)
            .where(nodes.c.name.in_(list(names)), nodes.c.left_at.is_(None))
            .values(left_at=now)
        )


def node_history(store: Store) -> list[dict[str, Any]]:
    """Every recorded node (name, entry, device_ids, joined_at, left_at), in the order they
    joined."""
    with store.read() as conn:
        rows = conn.execute(select(nodes).order_by(nodes.c.joined_at, nodes.c.name)).all()
    return [dict(r._mapping) for r in rows]


def record_start(store: Store, present: Sequence[Node], now: float) -> None:
    """At a start: the nodes there now joined, and recorded nodes not among them left."""
    names = {n.name for n in present}
    gone = [row["name"] for row in node_history(store) if row["name"] not in names]
    record_left(store, gone, now)
    record_joined(store, present, now)
