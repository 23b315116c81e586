"""The Ray tests share one local cluster per test process (a head and three nodes in their own
network and PID namespaces); tests that kill a node add their own first."""

from collections.abc import Iterator

import pytest
from ray_fixtures import HERE, require_namespaces

from hetsched.ray.testing import NamespacedCluster


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[NamespacedCluster]:
    require_namespaces()
    with NamespacedCluster("a100:2,t4:1,cpu:0", fake_devices=True, pythonpath=[HERE]) as cluster:
        yield cluster
