"""The error tree. Every error a client can see carries a stable machine-readable `code`."""

from __future__ import annotations


class IdempayError(Exception):
    """Base of every idempay error; `code` is stable and documented in API.md."""

    code = "INTERNAL"

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail or self.code)
        self.detail = detail


class InvalidRequest(IdempayError):
    code = "INVALID_REQUEST"

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.field = field


class Unauthenticated(IdempayError):
    code = "UNAUTHENTICATED"


class Forbidden(IdempayError):
    code = "FORBIDDEN"


class NotFound(IdempayError):
    code = "NOT_FOUND"


class RequestInProgress(IdempayError):
    code = "REQUEST_IN_PROGRESS"


class InvalidState(IdempayError):
    code = "INVALID_STATE"

    def __init__(self, detail: str, *, status: str | None = None) -> None:
        super().__init__(detail)
        self.status = status


class IdempotencyKeyReused(IdempayError):
    code = "IDEMPOTENCY_KEY_REUSED"


class BizNoReused(IdempayError):
    code = "BIZ_NO_REUSED"

    def __init__(self, detail: str, *, fields: tuple[str, ...] = ()) -> None:
        super().__init__(detail)
        self.fields = fields


class InsufficientBalance(IdempayError):
    code = "INSUFFICIENT_BALANCE"


class IllegalTransition(IdempayError):
    """A transition not in the table: a defect in the caller, never a client mistake."""

    code = "ILLEGAL_TRANSITION"

    def __init__(self, entity: str, frm: str, to: str) -> None:
        super().__init__(f"{entity}: {frm} -> {to} is not an allowed transition")
        self.entity, self.frm, self.to = entity, frm, to


class DuplicateKey(IdempayError):
    """A unique constraint refused an insert: the row already exists (storage -> domain)."""

    code = "DUPLICATE_KEY"

    def __init__(self, constraint: str) -> None:
        super().__init__(constraint)
        self.constraint = constraint


# --- what a channel call can end in, besides an answer -------------------------------------


class ChannelError(IdempayError):
    code = "CHANNEL_ERROR"


class OutcomeUnknown(ChannelError):
    """Timeout, reset, truncated or unparseable answer, 5xx: the channel may have executed."""

    code = "OUTCOME_UNKNOWN"


class NotSent(ChannelError):
    """The request provably never reached the channel (e.g. connection refused)."""

    code = "NOT_SENT"


class Declined(ChannelError):
    """The channel answered definitively that it did not execute (a business decline)."""

    code = "DECLINED"
