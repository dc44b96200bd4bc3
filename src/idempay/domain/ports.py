"""The ports (Protocols) the services depend on: Store, Channel, Clock, FrontLock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Any, Protocol

from idempay.domain.model import (
    Instruction,
    OpKind,
    Payment,
    PaymentView,
    Principal,
    Refund,
    RefundView,
    Split,
    SplitItem,
    SplitView,
)
from idempay.domain.states import Entity


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


# --- channel -----------------------------------------------------------------------------------


class ChannelStatus(StrEnum):
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    PROCESSING = "PROCESSING"
    NOT_FOUND = "NOT_FOUND"  # query only: the channel never received this request_id
    CLOSED = "CLOSED"  # close only: the request_id is closed and can never execute


@dataclass(frozen=True, slots=True)
class ChannelOp:
    """One operation as the channel sees it; `request_id` is the channel's idempotency key."""

    request_id: str
    kind: OpKind
    payment_ref: str
    amount: int
    currency: str
    notify_url: str | None = None
    receiver_id: str | None = None


@dataclass(frozen=True, slots=True)
class ChannelAnswer:
    request_id: str
    status: ChannelStatus
    amount: int | None = None
    currency: str | None = None
    channel_txn_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ChannelNotification:
    """A verified callback from a channel: the outcome of one request_id."""

    notify_id: str
    request_id: str
    kind: OpKind
    status: ChannelStatus
    amount: int
    currency: str
    payment_ref: str | None = None
    channel_txn_id: str | None = None


@dataclass(frozen=True, slots=True)
class StatementLine:
    """One executed operation on the channel's daily statement."""

    request_id: str
    kind: OpKind
    payment_ref: str
    amount: int
    currency: str
    status: ChannelStatus
    channel_txn_id: str | None
    executed_at: datetime
    receiver_id: str | None = None


@dataclass(frozen=True, slots=True)
class Discrepancy:
    """Evidence from a channel (or a person) that disagrees with our books."""

    dedupe_key: str
    source: str  # callback | query | operator | reconciliation
    cls: str  # AMOUNT_MISMATCH, UNKNOWN_REQUEST, CONTRADICTS_TERMINAL, ...
    channel: str
    request_id: str | None
    merchant_id: str | None
    payment_id: str | None
    local: dict[str, Any]
    remote: dict[str, Any]
    run_id: str | None = None


class Channel(Protocol):
    """A bank or provider. `execute` may raise OutcomeUnknown, NotSent or Declined."""

    name: str

    async def execute(self, op: ChannelOp) -> ChannelAnswer: ...

    async def query(self, kind: OpKind, request_id: str) -> ChannelAnswer: ...

    async def close(self, kind: OpKind, request_id: str) -> ChannelAnswer:
        """CLOSED when this closed it (it can never execute later); the real status when the
        request_id had already executed."""
        ...

    async def statement(self, day: date) -> list[StatementLine]:
        """Every operation the channel executed on `day` (UTC), each execution once."""
        ...

    def verify_callback(
        self, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> ChannelNotification:
        """The notification in a callback; raises InvalidSignature (channels.errors) for a bad or
        missing signature or a timestamp too far from `now`, checked before parsing the body."""
        ...

    def callback_ack(self) -> tuple[int, dict[str, Any]]:
        """The HTTP status and JSON body the channel expects for an accepted callback."""
        ...


# --- front lock --------------------------------------------------------------------------------


class FrontLock(Protocol):
    """A cheap, optional, never-authoritative lock in front of the database."""

    async def acquire(self, key: str, ttl_ms: int) -> str | None:
        """A token when acquired, None when someone else holds it (or the lock is unusable)."""
        ...

    async def release(self, key: str, token: str) -> None: ...


# --- store -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    """One compare-and-set: `entity` `id` from `frm` to `to`, with extra column `values`."""

    entity: Entity
    id: str
    frm: str
    to: str
    reason: str
    actor: str
    values: dict[str, Any] | None = None
    guard: dict[str, Any] | None = None  # extra equality conditions, e.g. the worker's lease


class Tx(Protocol):
    """One database transaction. Every method is part of it; nothing commits until it ends."""

    async def insert_payment(self, payment: Payment) -> None:
        """Raises DuplicateKey('payment_biz_no') when (merchant_id, biz_no) exists."""
        ...

    async def insert_instruction(self, instruction: Instruction) -> None:
        """Raises DuplicateKey('instruction_live') when the owner has a live instruction."""
        ...

    async def transition(self, change: Change, *, event: str | None = None) -> bool:
        """The compare-and-set: True when this call moved the row, False when the row was not
        in `frm` (someone else won). Writes the log row (and outbox event) when it moved."""
        ...

    async def log(
        self, entity: Entity, id: str, frm: str | None, to: str, reason: str, actor: str
    ) -> None: ...

    async def add_event(
        self, merchant_id: str, kind: str, object_id: str, data: dict[str, Any]
    ) -> None: ...

    async def get_payment(self, merchant_id: str, biz_no: str) -> Payment | None: ...

    async def get_payment_by_id(self, payment_id: str) -> Payment | None: ...

    async def get_instruction(self, request_id: str) -> Instruction | None: ...

    async def touch_instruction(
        self, request_id: str, status: str, guard: dict[str, Any], values: dict[str, Any]
    ) -> bool:
        """Bookkeeping without a status change (query count, next query time, lease), only
        while the instruction is still in `status` and matches `guard`."""
        ...

    async def insert_inbox(
        self, channel: str, notify_id: str, request_id: str, result: str, body: str
    ) -> None:
        """Raises DuplicateKey('callback_inbox') when (channel, notify_id) was seen."""
        ...

    async def set_inbox_result(self, channel: str, notify_id: str, result: str) -> None: ...

    async def add_discrepancy(self, d: Discrepancy) -> bool:
        """Record evidence that disagrees with our books; False if `dedupe_key` exists."""
        ...

    async def open_review(self, instruction: Instruction, reason: str) -> bool:
        """Open the review item of an instruction; False if it already has one."""
        ...

    async def close_review(
        self, request_id: str, outcome: str, note: str, resolved_by: str
    ) -> bool:
        """Close the UNRESOLVED review of an instruction, if one is open."""
        ...

    async def close_reviews(
        self, request_ids: Sequence[str], outcome: str, note: str, resolved_by: str
    ) -> int:
        """`close_review` of each of `request_ids`, in one statement; the number closed."""
        ...

    async def open_discrepancy_review(self, d: Discrepancy, reason: str) -> bool: ...

    async def resolve_review(self, review_id: str, outcome: str, note: str, by: str) -> bool:
        """Close one review item if it is still OPEN (a CAS on the review)."""
        ...

    # refunds, splits and the payment's balance (storage/balances.py)
    async def insert_refund(self, refund: Refund) -> None: ...

    async def insert_split(self, split: Split, items: list[SplitItem]) -> None: ...

    async def reserve(self, payment_id: str, amount: int) -> bool: ...

    async def settle_reservation(self, payment_id: str, amount: int, into: str | None) -> None: ...

    async def refund_purpose(self, refund_id: str) -> str: ...

    async def get_split_item(self, item_id: str) -> SplitItem | None: ...

    async def lock_split(self, split_id: str) -> Split | None: ...

    async def split_item_statuses(self, split_id: str) -> list[str]: ...


class WorkQueue(Protocol):
    """Leased batches of due work, shared safely by many workers."""

    async def claim_instructions(
        self,
        *,
        worker: str,
        lease_s: float,
        limit: int,
        sweep_before: datetime | None = None,
        favour: list[str] | None = None,
    ) -> list[Instruction]:
        """Due live instructions: `favour`'s merchants first, then largest amounts, oldest."""
        ...

    async def unknown_rates(self, since: datetime) -> dict[str, float]:
        """Per merchant, the share of its instructions since `since` still unresolved."""
        ...

    async def claim_events(self, *, lease_s: float, limit: int) -> list[dict[str, Any]]: ...

    async def finish_event(
        self,
        seq: int,
        *,
        status: str,
        attempts: int,
        error: str | None,
        next_attempt_at: datetime | None,
    ) -> None: ...


class Store(Protocol):
    def begin(self) -> AbstractAsyncContextManager[Tx]:
        """A write transaction (SQLite: BEGIN IMMEDIATE)."""
        ...

    async def get_payment(self, merchant_id: str, biz_no: str) -> Payment | None: ...

    async def get_payment_by_id(self, payment_id: str) -> Payment | None: ...

    async def payment_view(self, payment: Payment) -> PaymentView: ...

    async def find_view(self, merchant_id: str, biz_no: str) -> PaymentView | None:
        """The payment and its instructions in one query (the charge path's lookups)."""
        ...

    async def view_by_id(self, payment_id: str) -> PaymentView | None: ...

    async def get_instruction(self, request_id: str) -> Instruction | None: ...

    async def list_payments(
        self,
        merchant_id: str,
        *,
        order_no: str | None,
        status: str | None,
        limit: int,
        before_id: str | None,
    ) -> list[Payment]: ...

    async def find_principal(self, key_hash: str) -> Principal | None: ...

    async def add_merchant(self, merchant_id: str, name: str, key_hash: str) -> None: ...

    async def add_operator(self, operator_id: str, name: str, key_hash: str) -> None: ...

    async def transition_log(self, entity: Entity, id: str) -> list[dict[str, Any]]: ...

    async def get_review(self, review_id: str) -> dict[str, Any] | None: ...

    async def get_refund(self, merchant_id: str, refund_no: str) -> Refund | None: ...

    async def refund_view(self, refund: Refund) -> RefundView: ...

    async def get_split(self, merchant_id: str, split_no: str) -> Split | None: ...

    async def get_split_by_id(self, split_id: str) -> Split | None: ...

    async def split_view(self, split: Split) -> SplitView: ...

    async def list_reviews(
        self, *, status: str | None, limit: int, before_id: str | None
    ) -> list[dict[str, Any]]: ...

    async def payment_views(self, payments: Sequence[Payment]) -> list[PaymentView]:
        """Views of many payments with one query for all their instructions (lists)."""
        ...

    async def find_principal_hash(self, key_hash: str) -> tuple[Principal, str] | None:
        """The principal whose stored key hash equals `key_hash`, with that stored hash, in one
        round trip (merchants and operators); the caller compares in constant time."""
        ...

    async def ping(self) -> None:
        """Raise unless the database answers."""
        ...


# --- idempotency keys --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """One `Idempotency-Key` of one merchant: the request's fingerprint, the resource it made,
    and (once answered) the response to replay. No response yet = the request is in flight."""

    merchant_id: str
    key: str
    fingerprint: str
    resource_id: str | None
    response_status: int | None
    response_body: str | None
    created_at: datetime
    expires_at: datetime


class IdempotencyRecords(Protocol):
    async def get(self, merchant_id: str, key: str) -> IdempotencyRecord | None: ...

    async def claim(self, tx: Tx, record: IdempotencyRecord) -> None:
        """Insert inside `tx` (the transaction that writes the resource); raises
        DuplicateKey('idempotency_key') when the merchant already has this key."""
        ...

    async def complete(self, merchant_id: str, key: str, status: int, body: str) -> bool:
        """Store the response of an in-flight record; False if it was already answered."""
        ...

    async def remember(self, record: IdempotencyRecord) -> bool:
        """Insert an answered record in its own transaction; False if the key exists."""
        ...

    async def forget_expired(self, merchant_id: str, key: str, now: datetime) -> None: ...

    async def purge_expired(self, now: datetime, limit: int) -> int:
        """Delete up to `limit` expired records (for the worker); answers how many."""
        ...
