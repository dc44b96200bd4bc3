"""The records the services work with: payments, instructions, merchants, log rows, events."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from idempay.domain.errors import InvalidRequest

IDENTIFIER = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def check_identifier(value: object, field: str) -> str:
    """Client-supplied identifiers match ^[A-Za-z0-9_.:-]{1,64}$ (API.md, Conventions)."""
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
        raise InvalidRequest(f"{field} must match ^[A-Za-z0-9_.:-]{{1,64}}$", field=field)
    return value


class OpKind(StrEnum):
    PAY = "PAY"
    REFUND = "REFUND"
    SPLIT = "SPLIT"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a merchant (sees only its own objects) or an operator."""

    id: str
    name: str
    is_operator: bool = False


@dataclass(frozen=True, slots=True)
class Payment:
    id: str
    merchant_id: str
    biz_no: str
    order_no: str
    amount: int
    currency: str
    channel: str
    status: str
    attempt: int
    refunded_amount: int
    split_amount: int
    reserved_amount: int
    description: str | None
    notify_url: str | None
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Instruction:
    """One attempt at the channel, written before it is sent; `request_id` never changes."""

    request_id: str
    merchant_id: str
    payment_id: str
    owner_kind: str
    owner_id: str
    kind: str
    channel: str
    amount: int
    currency: str
    status: str
    attempt: int
    digest: str
    send_count: int
    query_count: int
    next_query_at: datetime | None
    last_error: str | None
    channel_txn_id: str | None
    version: int
    created_at: datetime
    updated_at: datetime
    receiver_id: str | None = None
    lease_owner: str | None = None
    lease_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class Refund:
    id: str
    merchant_id: str
    refund_no: str
    payment_id: str
    biz_no: str
    amount: int
    currency: str
    channel: str
    status: str
    reason: str | None
    version: int
    created_at: datetime
    updated_at: datetime
    purpose: str = "REQUESTED"  # or DUPLICATE_CHARGE: returning an extra charge, not reserved


@dataclass(frozen=True, slots=True)
class Split:
    id: str
    merchant_id: str
    split_no: str
    payment_id: str
    biz_no: str
    amount: int
    currency: str
    channel: str
    status: str
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class SplitItem:
    id: str
    split_id: str
    merchant_id: str
    position: int
    receiver_id: str
    amount: int
    status: str
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class RefundView:
    refund: Refund
    instructions: tuple[Instruction, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class SplitView:
    """A split with its items, each with its instruction (None before the split starts)."""

    split: Split
    items: tuple[tuple[SplitItem, Instruction | None], ...] = field(default=())


@dataclass(frozen=True, slots=True)
class PaymentView:
    """A payment with its instructions, oldest attempt first: what the API answers."""

    payment: Payment
    instructions: tuple[Instruction, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class ChargeResult:
    """The answer of create-or-get: `created` when this call wrote it, `replayed` when it did
    nothing new."""

    view: PaymentView
    created: bool
    replayed: bool
    stopped_by: str | None = None  # for a replay: the layer that stopped it (front_lock, biz_no)


def new_id(prefix: str, now: datetime) -> str:
    """A unique id that sorts by creation time: prefix, 12 hex digits of ms, 16 random hex."""
    ms = int(now.timestamp() * 1000)
    return f"{prefix}_{ms:012x}{secrets.token_hex(8)}"


def digest(body: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of what was (or will be) sent to the channel."""
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode()).hexdigest()
