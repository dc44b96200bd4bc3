"""The initial schema: merchants, operators, payments, instructions, log, outbox, idempotency keys.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

from idempay.storage import tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# The first revision creates exactly the tables of this release's tables.py; every later
# revision states its changes explicitly with op.* calls.
INITIAL = (
    "merchants",
    "operators",
    "payments",
    "instructions",
    "transitions",
    "outbox",
    "idempotency_keys",
    "callback_inbox",
    "discrepancies",
    "reviews",
    "refunds",
    "splits",
    "split_items",
    "reconciliation_runs",
)


def upgrade() -> None:
    bind = op.get_bind()
    tables.metadata.create_all(bind, tables=[tables.metadata.tables[n] for n in INITIAL])


def downgrade() -> None:
    bind = op.get_bind()
    tables.metadata.drop_all(bind, tables=[tables.metadata.tables[n] for n in INITIAL])
