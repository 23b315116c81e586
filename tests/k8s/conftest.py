"""Fixtures of the Kubernetes tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A fresh directory under /tmp: AF_UNIX socket paths must stay under 108 bytes, and
    pytest's tmp_path may be longer."""
    path = Path(tempfile.mkdtemp(prefix="hs-k8s-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
