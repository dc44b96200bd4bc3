"""Transport errors of channel calls mapped in one place (`map_exceptions`), and the errors a
channel adapter adds to the domain's: an invalid callback signature, a rejected request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from idempay.domain.errors import Declined, NotSent, OutcomeUnknown, Unauthenticated


class InvalidSignature(Unauthenticated):
    """A callback whose signature is missing or wrong, or whose timestamp is more than the
    tolerance away from now (either way): nothing in it may be believed or applied."""

    code = "INVALID_SIGNATURE"


class ChannelRejected(Declined):
    """The channel refused the request as invalid (a 4xx) before executing it."""

    code = "CHANNEL_REJECTED"

    def __init__(self, detail: str, *, status_code: int, channel_code: str | None) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.channel_code = channel_code


# Raised before a single byte of the request could have left this process.
_NEVER_SENT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.UnsupportedProtocol,
)


@contextmanager
def map_exceptions() -> Iterator[None]:
    """Turn what can go wrong around one channel call into the domain's errors.

    Connection refused / connect or pool timeout: NotSent (the request never left). Anything
    else once it may have left (read or write timeout, reset, protocol error, truncated or
    unparseable body, a 5xx raised with `raise_for_status`): OutcomeUnknown, never a failure.
    """
    try:
        yield
    except _NEVER_SENT as e:
        raise NotSent(f"{type(e).__name__}: {e}") from e
    except httpx.HTTPStatusError as e:
        raise OutcomeUnknown(f"{e.response.status_code} from channel") from e
    except httpx.HTTPError as e:
        raise OutcomeUnknown(f"{type(e).__name__}: {e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise OutcomeUnknown(f"unparseable answer: {e}") from e
    except (KeyError, TypeError, ValueError) as e:
        raise OutcomeUnknown(f"malformed answer: {type(e).__name__}: {e}") from e
