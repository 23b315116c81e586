"""Alembic environment: migrations run online against the connection the store hands over
in ``config.attributes["connection"]``, or against ``sqlalchemy.url``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from hetsched.controlplane.storage.tables import metadata

config = context.config


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=metadata,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = engine_from_config(
        config.get_section(config.config_ini_section) or {},
        prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )
    with engine.connect() as conn:
        _run(conn)
