"""The crash soak in the test suite: 20 kill-and-restart cycles across every phase (see
``soak.py``); ``make soak`` runs 200. ``HETSCHED_SOAK_CYCLES`` and ``HETSCHED_SOAK_SEED``
change the count and the seed; a failure names the seed and the cycle."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from soak import PHASES, run_soak

pytestmark = pytest.mark.slow

CYCLES = int(os.environ.get("HETSCHED_SOAK_CYCLES", "20"))
SEED = int(os.environ.get("HETSCHED_SOAK_SEED", "20261130"))


def test_the_service_survives_kill_9_in_every_phase(tmp_path: Path) -> None:
    began = time.monotonic()

    def progress(done: int) -> None:
        if done % 10 == 0:  # seen with -s (make soak)
            print(f"soak: {done}/{CYCLES} cycles, {time.monotonic() - began:.0f}s", file=sys.stderr)

    report = run_soak(tmp_path, CYCLES, SEED, progress)
    print("\n" + report.summary())
    # every phase was visited, and most reached the state the kill was aimed at
    assert set(report.phases) == set(PHASES)
    assert sum(report.missed.values()) <= CYCLES // 4, report.summary()
    assert report.states.get("succeeded", 0) > CYCLES, report.summary()
