"""Alembic environment: runs on the connection idempay hands it (see storage/migrate.py)."""

from __future__ import annotations

from alembic import context

from idempay.storage.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `idempay migrate` (storage.migrate.upgrade)")
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
