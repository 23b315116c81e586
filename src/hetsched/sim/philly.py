"""Philly job runtimes: the empirical distribution synthetic workloads draw durations from.

The file is one ``runtime`` column in seconds (Microsoft Philly, as extracted by Alibaba's
PAI team; see the trace folder's README for origin and license). Without the file, a
quantile table from the same data stands in: log-linear interpolation between the
published quantiles, so tests and users without the trace get the same shape.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["PHILLY_QUANTILES", "RuntimeDistribution", "load_runtimes"]

FloatArray = np.ndarray[Any, np.dtype[np.float64]]

#: (quantile, seconds) of philly_runtime.csv, counted from the file (zeros dropped)
PHILLY_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.0, 1.0),
    (0.10, 61.0),
    (0.25, 131.0),
    (0.50, 1186.0),
    (0.75, 3342.0),
    (0.90, 12859.0),
    (0.99, 287283.0),
    (1.0, 4628239.0),
)


def load_runtimes(path: str | Path) -> FloatArray:
    """Runtimes in seconds from a one-column CSV with a ``runtime`` header; zeros dropped.

    Raises ValueError naming the file and line of a value that is not a number >= 0.
    """
    values: list[float] = []
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or header[0].strip() != "runtime":
            raise ValueError(f"{path}:1: header: expected a 'runtime' column")
        for cells in reader:
            if not cells:
                continue
            try:
                value = float(cells[0])
            except ValueError:
                raise ValueError(
                    f"{path}:{reader.line_num}: runtime: not a number: {cells[0]!r}"
                ) from None
            if value < 0 or not np.isfinite(value):
                raise ValueError(f"{path}:{reader.line_num}: runtime: must be >= 0, got {value}")
            if value > 0:
                values.append(value)
    return np.asarray(values, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class RuntimeDistribution:
    """Draws task durations: from an empirical sample, or from :data:`PHILLY_QUANTILES`.

    ``max_s`` caps every draw (a 53-day job dominates a short replay's makespan).
    """

    sample: FloatArray | None = None
    max_s: float | None = None
    source: str = "philly quantiles"

    @classmethod
    def from_file(cls, path: str | Path, max_s: float | None = None) -> RuntimeDistribution:
        return cls(load_runtimes(path), max_s, str(path))

    def draw(self, rng: np.random.Generator, count: int) -> FloatArray:
        if self.sample is not None and self.sample.size:
            out = rng.choice(self.sample, size=count)
        else:
            q = np.array([p for p, _ in PHILLY_QUANTILES])
            log_s = np.log(np.array([s for _, s in PHILLY_QUANTILES]))
            out = np.exp(np.interp(rng.random(count), q, log_s))
        out = np.maximum(np.round(out), 1.0)
        if self.max_s is not None:
            out = np.minimum(out, self.max_s)
        return np.asarray(out, dtype=np.float64)

    def mean(self) -> float:
        """The mean draw (estimated from 100,000 seeded draws for the quantile table)."""
        return float(self.draw(np.random.default_rng(0), 100_000).mean())
