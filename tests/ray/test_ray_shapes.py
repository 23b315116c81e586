"""Job shapes under `hetsched up --executor ray`: a job with groups whose driver reaches its
workers at the addresses its peers list (each node's address in Ray's table), and an
elastic job that starts with the count that fits, each task told its count and rank."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from ray_fixtures import check

from hetsched.ray.testing import NamespacedCluster


@pytest.fixture(scope="module")
def shapes(ray_cluster: NamespacedCluster) -> Iterator[dict[str, Any]]:
    value = check(ray_cluster.run("ray_bodies_shapes:shapes_on_ray", timeout_s=300))
    assert isinstance(value, dict)
    assert "error" not in value, value["error"]
    yield value


def test_a_driver_on_ray_reaches_its_workers_at_the_addresses_its_peers_list(
    shapes: dict[str, Any],
) -> None:
    found = shapes["groups"]
    assert found["job"]["state"] == "succeeded", found["job"]
    envs = found["envs"]
    assert sorted(envs) == ["driver-0", "workers-0", "workers-1"]
    peers = json.loads(envs["driver-0"]["HETSCHED_PEERS"])
    address = {n["name"]: n["labels"]["hetsched.io/address"] for n in found["nodes"]}
    for name, env in envs.items():
        group, index = name.split("-")
        assert (env["HETSCHED_GROUP"], env["HETSCHED_GROUP_INDEX"]) == (group, index)
        assert json.loads(env["HETSCHED_PEERS"]) == peers
        # each task's host is its node's address in Ray's table, the one the others got
        assert env["HETSCHED_HOST"] == address[env["HETSCHED_NODE"]]
        assert peers[group][int(index)] == {
            "index": int(index),
            "host": env["HETSCHED_HOST"],
            "port": int(env["HETSCHED_PORT"]),
        }
    assert found["got"] == {"workers-0": "hello worker 0", "workers-1": "hello worker 1"}


def test_an_elastic_job_on_ray_starts_with_the_count_that_fits(shapes: dict[str, Any]) -> None:
    found = shapes["elastic"]
    assert found["job"]["state"] == "succeeded", found["job"]
    # 3 tasks of one A100 each, 2 A100s in the cluster: run 1 with ranks 0 and 1 of 2
    assert found["counts"] == {"1-0-2": "a100-0", "1-1-2": "a100-0"}
