"""What the speed learner keeps: one row per (job type, device model) with its estimate.
Part of :class:`~hetsched.controlplane.storage.store.Store` (which owns every SQL statement of the
service), kept here so each module stays one concern."""

from __future__ import annotations

from contextlib import AbstractContextManager

from sqlalchemy import Connection, delete, insert, select

from hetsched.controlplane.speedlearn import Estimate
from hetsched.controlplane.storage.tables import speed_estimates

__all__ = ["SpeedRecords"]


class SpeedRecords:
    """Reads and writes of learned speeds (a part of Store, which provides the connections)."""

    def write(self) -> AbstractContextManager[Connection]:  # provided by Store
        raise NotImplementedError

    def read(self) -> AbstractContextManager[Connection]:  # provided by Store
        raise NotImplementedError

    def speed_estimates(self) -> list[Estimate]:
        """Every stored estimate, by job type and model."""
        table = speed_estimates
        with self.read() as conn:
            rows = conn.execute(select(table).order_by(table.c.job_type, table.c.model)).all()
        return [
            Estimate(r.job_type, r.model, float(r.rate), int(r.samples), float(r.updated_at))
            for r in rows
        ]

    def save_speed_estimates(self, estimates: list[Estimate]) -> None:
        """Store these estimates (each replaces its job type and model's), in one transaction."""
        if not estimates:
            return
        table = speed_estimates
        with self.write() as conn:
            for e in estimates:
                conn.execute(
                    delete(table).where(table.c.job_type == e.job_type, table.c.model == e.model)
                )
                conn.execute(
                    insert(table).values(
                        job_type=e.job_type,
                        model=e.model,
                        rate=e.rate,
                        samples=e.samples,
                        updated_at=e.updated_at,
                    )
                )
