"""The nodes table: nodes recorded at a start and as they join and leave, and exported as
the history's cluster; on a SQLite file and on a PostgreSQL server."""

from __future__ import annotations

from hetsched.controlplane.history import export_history
from hetsched.controlplane.storage.store import Store
from hetsched.model.cluster_spec import parse_cluster
from hetsched.model.device import Device, Node


def _node(name: str, gpus: int = 1) -> Node:
    devices = tuple(Device(f"{name}/gpu{i}", "gpu", "nvidia", "A100") for i in range(gpus))
    return Node(name, 8000, 32768, devices)


def _seen(store: Store) -> dict[str, tuple[float, float | None]]:
    return {r["name"]: (r["joined_at"], r["left_at"]) for r in store.node_history()}


def test_nodes_join_leave_and_come_back(store: Store) -> None:
    store.record_nodes_at_start([_node("a"), _node("b")], 100.0)
    store.record_nodes_at_start([_node("a")], 150.0)  # restarted without b
    assert _seen(store) == {"a": (100.0, None), "b": (100.0, 150.0)}
    store.record_joined([_node("b", gpus=2)], 170.0)  # back, with another GPU
    store.record_left(["a", "unknown"], 180.0)
    assert _seen(store) == {"a": (100.0, 180.0), "b": (100.0, None)}
    [b] = [r for r in store.node_history() if r["name"] == "b"]
    assert parse_cluster({"nodes": [b["entry"]]}) == [_node("b", gpus=2)]
    assert b["device_ids"] == ["b/gpu0", "b/gpu1"]


def test_an_export_without_jobs_holds_the_nodes(store: Store) -> None:
    store.record_nodes_at_start([_node("a")], 100.0)
    store.record_left(["a"], 130.0)
    document = export_history(store)
    [node] = document.nodes
    # no submissions: time 0 is the first join
    assert document.origin == 100.0 and (node.joined_s, node.left_s) == (0.0, 30.0)
    assert document.jobs == () and document.profile is None


def test_nodes_keep_the_schedulers_order(store: Store) -> None:
    # the scheduler adds the nodes of a start in their order, and later ones after them
    store.record_nodes_at_start([_node("z"), _node("a")], 100.0)
    store.record_joined([_node("m")], 110.0)
    assert [r["name"] for r in store.node_history()] == ["z", "a", "m"]
    store.record_nodes_at_start([_node("m"), _node("z")], 200.0)  # restarted in another order
    assert [r["name"] for r in store.node_history()] == ["m", "z", "a"]
    assert [n.entry["name"] for n in export_history(store).nodes] == ["m", "z", "a"]
