"""Fixtures of the Kubernetes tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hetsched.k8s.api import KubeClusterAPI, for_host
from k8s.apiserver import ApiServer


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A fresh directory under /tmp: AF_UNIX socket paths must stay under 108 bytes, and
    pytest's tmp_path may be longer."""
    path = Path(tempfile.mkdtemp(prefix="hs-k8s-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server() -> Iterator[ApiServer]:
    """The API server double, on a loopback port of its own."""
    srv = ApiServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def api(server: ApiServer) -> Iterator[KubeClusterAPI]:
    """A client of ``server`` (a test module may define its own, with objects preloaded)."""
    client = for_host(server.url)
    yield client
    client.close()
