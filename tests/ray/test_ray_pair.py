"""A standby pair with the Ray executor: the leader SIGKILLed with four tasks running on
the Ray nodes; the standby takes over, adopts them through the node agents, and each job
ends succeeded with its task started once (no second run). How long the takeover takes
is measured by bench/standby_failover.py, not asserted here."""

from __future__ import annotations

from ray_fixtures import check

from hetsched.ray.testing import NamespacedCluster


def test_the_standby_adopts_the_tasks_on_ray_nodes(ray_cluster: NamespacedCluster) -> None:
    value = check(ray_cluster.run("ray_bodies_pair:failover", timeout_s=400))
    assert isinstance(value, dict)
    assert value["states"] == ["succeeded"] * 4, value["log"]
    assert value["runs"] == [1] * 4
    assert set(value["starts"].values()) == {1} and value["other_runs"] == []
