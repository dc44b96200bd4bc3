"""Every table and constraint. Money is BIGINT minor units; times are naive UTC in the database."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Dialect,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    event,
    text,
)

from idempay.domain.states import LIVE_INSTRUCTION
from idempay.storage.mysql import mysql_live_instruction_ddl

naming = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
}
# MariaDB compares case-insensitively by default; identifiers here are case-sensitive.
MYSQL: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}
metadata = MetaData(naming_convention=naming)


class UTCDateTime(TypeDecorator[datetime]):
    """Stores naive UTC, answers aware UTC, on every dialect alike."""

    impl = DateTime(timezone=False)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # SQLite may hand back text
            value = datetime.fromisoformat(value)
        aware: datetime = (
            value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        )
        return aware


ID = String(48)
CODE = String(16)
KEY = String(64)  # client identifiers: ^[A-Za-z0-9_.:-]{1,64}$
LogId = BigInteger().with_variant(Integer(), "sqlite")

merchants = Table(
    "merchants",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", String(200), nullable=False),
    Column("api_key_hash", String(64), nullable=False, unique=True),
    Column("created_at", UTCDateTime, nullable=False),
    **MYSQL,
)

operators = Table(
    "operators",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", String(200), nullable=False),
    Column("api_key_hash", String(64), nullable=False, unique=True),
    Column("created_at", UTCDateTime, nullable=False),
    **MYSQL,
)

payments = Table(
    "payments",
    metadata,
    Column("id", ID, primary_key=True),
    Column("merchant_id", ID, nullable=False),
    Column("biz_no", KEY, nullable=False),
    Column("order_no", KEY, nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("channel", String(32), nullable=False),
    Column("status", CODE, nullable=False),
    Column("attempt", Integer, nullable=False, server_default=text("1")),
    Column("refunded_amount", BigInteger, nullable=False, server_default=text("0")),
    Column("split_amount", BigInteger, nullable=False, server_default=text("0")),
    Column("reserved_amount", BigInteger, nullable=False, server_default=text("0")),
    Column("description", String(256)),
    Column("notify_url", String(2048)),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    UniqueConstraint("merchant_id", "biz_no", name="uq_payments_biz_no"),
    Index("ix_payments_order", "merchant_id", "order_no", "id"),
    Index("ix_payments_status", "merchant_id", "status", "id"),
    **MYSQL,
)

_live = "status IN ({})".format(", ".join(f"'{s}'" for s in sorted(LIVE_INSTRUCTION)))

instructions = Table(
    "instructions",
    metadata,
    Column("request_id", ID, primary_key=True),
    Column("merchant_id", ID, nullable=False),
    Column("payment_id", ID, nullable=False),
    Column("owner_kind", CODE, nullable=False),
    Column("owner_id", ID, nullable=False),
    Column("kind", CODE, nullable=False),
    Column("channel", String(32), nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("receiver_id", KEY),
    Column("status", CODE, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("digest", String(64), nullable=False),
    Column("send_count", Integer, nullable=False, server_default=text("0")),
    Column("query_count", Integer, nullable=False, server_default=text("0")),
    Column("next_query_at", UTCDateTime),
    Column("last_error", String(256)),
    Column("channel_txn_id", String(64)),
    Column("lease_owner", String(64)),
    Column("lease_until", UTCDateTime),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_instructions_payment", "payment_id"),
    Index("ix_instructions_due", "status", "next_query_at"),
    Index("ix_instructions_merchant_created", "merchant_id", "created_at"),
    Index("ix_instructions_settled", "channel", "status", "created_at"),  # reconciliation
    # At most one live instruction per owner. PostgreSQL and SQLite: a partial unique index.
    # MariaDB has none; its migration adds a generated column instead (storage/mysql.py).
    Index(
        "uq_instructions_live",
        "owner_id",
        unique=True,
        postgresql_where=text(_live),
        sqlite_where=text(_live),
    ).ddl_if(dialect=("postgresql", "sqlite")),  # type: ignore[arg-type]  # tuple: documented
    **MYSQL,
)
event.listen(instructions, "after_create", mysql_live_instruction_ddl(_live))

transitions = Table(
    "transitions",
    metadata,
    Column("id", LogId, primary_key=True, autoincrement=True),
    Column("entity", CODE, nullable=False),
    Column("entity_id", ID, nullable=False),
    Column("from_status", CODE),
    Column("to_status", CODE, nullable=False),
    Column("reason", String(512), nullable=False),
    Column("actor", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_transitions_entity", "entity_id", "id"),
    **MYSQL,
)

outbox = Table(
    "outbox",
    metadata,
    Column("seq", LogId, primary_key=True, autoincrement=True),  # delivery order
    Column("id", ID, nullable=False, unique=True),  # the stable event id merchants dedupe on
    Column("merchant_id", ID, nullable=False),
    Column("kind", String(64), nullable=False),
    Column("object_id", ID, nullable=False),
    Column("data", Text, nullable=False),
    Column("status", CODE, nullable=False, server_default=text("'PENDING'")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", UTCDateTime),
    Column("lease_until", UTCDateTime),
    Column("last_error", String(256)),
    Column("delivered_at", UTCDateTime),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_outbox_due", "status", "next_attempt_at"),
    Index("ix_outbox_object", "object_id", "seq"),
    **MYSQL,
)

# Callbacks received, keyed by the channel's notify id: a duplicate is acknowledged, not applied.
callback_inbox = Table(
    "callback_inbox",
    metadata,
    Column("channel", String(32), primary_key=True),
    Column("notify_id", KEY, primary_key=True),
    Column("request_id", ID, nullable=False),
    Column("result", CODE, nullable=False),  # APPLIED | NOOP | DISCREPANCY
    Column("body", Text, nullable=False),
    Column("received_at", UTCDateTime, nullable=False),
    **MYSQL,
)

# Evidence that disagrees with our books, never dropped. `dedupe_key` makes recording idempotent.
discrepancies = Table(
    "discrepancies",
    metadata,
    Column("id", ID, primary_key=True),
    Column("dedupe_key", String(200), nullable=False, unique=True),
    Column("source", CODE, nullable=False),  # callback | query | operator | reconciliation
    Column("class", String(32), nullable=False),
    Column("channel", String(32), nullable=False),
    Column("request_id", ID),
    Column("merchant_id", ID),
    Column("payment_id", ID),
    Column("local", Text, nullable=False),
    Column("remote", Text, nullable=False),
    Column("run_id", ID),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_discrepancies_run", "run_id"),
    **MYSQL,
)

# The manual-confirmation queue. kind UNRESOLVED: an instruction the worker could not resolve
# (resolving it moves the instruction); kind DISCREPANCY: evidence reconciliation could not
# correct safely (resolving it records the decision).
reviews = Table(
    "reviews",
    metadata,
    Column("id", ID, primary_key=True),
    Column("dedupe_key", String(200), nullable=False, unique=True),
    Column("kind", CODE, nullable=False),
    Column("request_id", ID),
    Column("merchant_id", ID),
    Column("payment_id", ID),
    Column("discrepancy_id", ID),
    Column("reason", String(512), nullable=False),
    Column("status", CODE, nullable=False),  # OPEN | RESOLVED
    Column("outcome", CODE),
    Column("note", String(1000)),
    Column("resolved_by", String(64)),
    Column("created_at", UTCDateTime, nullable=False),
    Column("resolved_at", UTCDateTime),
    Index("ix_reviews_status", "status", "id"),
    **MYSQL,
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("merchant_id", ID, primary_key=True),
    Column("key", KEY, primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("resource_id", ID),  # the payment the keyed request created or changed
    Column("response_status", Integer),  # NULL while the first request is in flight
    Column("response_body", Text),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Index("ix_idempotency_keys_expires", "expires_at"),
    **MYSQL,
)

refunds = Table(
    "refunds",
    metadata,
    Column("id", ID, primary_key=True),
    Column("merchant_id", ID, nullable=False),
    Column("refund_no", KEY, nullable=False),
    Column("payment_id", ID, nullable=False),
    Column("biz_no", KEY, nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("channel", String(32), nullable=False),
    Column("status", CODE, nullable=False),
    Column("reason", String(256)),
    # REQUESTED by the merchant (reserved against the payment), or DUPLICATE_CHARGE: returning an
    # extra charge found by reconciliation (not the payment's money, so nothing is reserved)
    Column("purpose", CODE, nullable=False, server_default=text("'REQUESTED'")),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    UniqueConstraint("merchant_id", "refund_no", name="uq_refunds_refund_no"),
    Index("ix_refunds_payment", "payment_id"),
    **MYSQL,
)

splits = Table(
    "splits",
    metadata,
    Column("id", ID, primary_key=True),
    Column("merchant_id", ID, nullable=False),
    Column("split_no", KEY, nullable=False),
    Column("payment_id", ID, nullable=False),
    Column("biz_no", KEY, nullable=False),
    Column("amount", BigInteger, nullable=False),  # the sum of the items
    Column("currency", String(3), nullable=False),
    Column("channel", String(32), nullable=False),
    Column("status", CODE, nullable=False),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    UniqueConstraint("merchant_id", "split_no", name="uq_splits_split_no"),
    Index("ix_splits_payment", "payment_id"),
    **MYSQL,
)

split_items = Table(
    "split_items",
    metadata,
    Column("id", ID, primary_key=True),
    Column("split_id", ID, nullable=False),
    Column("merchant_id", ID, nullable=False),
    Column("position", Integer, nullable=False),
    Column("receiver_id", KEY, nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("status", CODE, nullable=False),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    UniqueConstraint("split_id", "receiver_id", name="uq_split_items_receiver"),
    **MYSQL,
)

reconciliation_runs = Table(
    "reconciliation_runs",
    metadata,
    Column("id", ID, primary_key=True),
    Column("channel", String(32), nullable=False),
    Column("day", String(10), nullable=False),
    Column("status", CODE, nullable=False),  # RUNNING | DONE | FAILED
    Column("schedule_key", String(64), unique=True),  # set for the worker's daily run only
    Column("counts", Text, nullable=False, server_default=text("'{}'")),
    Column("discrepancies", Text, nullable=False, server_default=text("'[]'")),
    Column("error", String(512)),
    Column("created_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime),
    Index("ix_reconciliation_runs_day", "channel", "day"),
    **MYSQL,
)
