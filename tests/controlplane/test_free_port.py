"""Ports for test servers: each pytest-xdist worker probes a block of its own, below the
kernel's ephemeral range, so servers of tests running side by side never draw one port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from hetsched.controlplane import testing


def test_a_worker_draws_from_its_own_block_and_skips_a_port_in_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    monkeypatch.setattr(testing, "_next", {"gw3": 0})
    block = range(20_000 + 3 * 500, 20_000 + 4 * 500)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", block[0]))
        taken.listen()
        ports = [testing.free_port() for _ in range(3)]
    assert all(p in block for p in ports)
    assert block[0] not in ports
    assert len(set(ports)) == 3


def test_another_worker_draws_from_another_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setattr(testing, "_next", {})
    assert testing.free_port() in range(20_000, 20_500)


def test_outside_pytest_xdist_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
    low, _ = map(int, text.split())
    assert testing.free_port() >= low
