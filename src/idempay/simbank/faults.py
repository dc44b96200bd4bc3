"""The fault set of `PUT /_sim/faults` and the seeded dice that decide, request by request,
which faults strike: one random.Random(seed), seven draws per operation in a fixed order."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

RATES = (
    "drop_response_rate",
    "timeout_rate",
    "error_rate",
    "decline_rate",
    "callback_duplicate_rate",
    "callback_loss_rate",
    "async_rate",
)
DURATIONS_MS = ("timeout_hold_ms", "latency_ms", "callback_delay_ms", "async_settle_ms")
MAX_MS = 600_000


@dataclass(frozen=True, slots=True)
class Faults:
    """Every knob; a PUT replaces the whole set, so a knob not given is back to this default."""

    drop_response_rate: float = 0.0  # execute, then close the connection without answering
    timeout_rate: float = 0.0  # execute, then answer only after timeout_hold_ms
    timeout_hold_ms: int = 30_000
    error_rate: float = 0.0  # answer 503 without executing
    decline_rate: float = 0.0  # execute as a business FAILED
    latency_ms: int = 0  # every channel endpoint answers this much later
    callback_duplicate_rate: float = 0.0  # deliver the callback twice (same notify_id)
    callback_delay_ms: int = 0  # wait this long before the first delivery
    callback_loss_rate: float = 0.0  # never deliver the callback
    async_rate: float = 0.0  # answer PROCESSING, settle after async_settle_ms
    async_settle_ms: int = 300
    idempotency: bool = True  # False: a repeated request_id executes again
    seed: int | None = None  # None: a fresh unpredictable sequence

    @classmethod
    def parse(cls, body: object) -> Faults:
        """The fault set of a PUT body; ValueError (naming the knob) when anything is off."""
        if not isinstance(body, dict):
            raise ValueError("the fault set must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(body) - known)
        if unknown:
            raise ValueError(f"unknown fault knob(s): {', '.join(unknown)}")
        for name, value in body.items():
            _check(name, value)
        values: dict[str, Any] = {k: float(v) if k in RATES else v for k, v in body.items()}
        return replace(cls(), **values)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check(name: str, value: object) -> None:
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if name in RATES and not (is_number and 0 <= value <= 1):  # type: ignore[operator]
        raise ValueError(f"{name} must be a number between 0 and 1")
    if name in DURATIONS_MS and not (type(value) is int and 0 <= value <= MAX_MS):
        raise ValueError(f"{name} must be an integer of milliseconds between 0 and {MAX_MS}")
    if name == "idempotency" and not isinstance(value, bool):
        raise ValueError("idempotency must be true or false")
    if name == "seed" and not (value is None or (type(value) is int and abs(value) < 2**63)):
        raise ValueError("seed must be an integer or null")


@dataclass(frozen=True, slots=True)
class Decision:
    """What strikes one operation request; drawn when it arrives, used when it is answered."""

    error: bool = False
    decline: bool = False
    pending: bool = False  # async: answer PROCESSING, settle later
    drop: bool = False
    timeout: bool = False
    callback_loss: bool = False
    callback_duplicate: bool = False


class Dice:
    """One random.Random(seed) per fault set; `roll` always takes seven draws, in the order of
    Decision's fields, so the same seed and the same request sequence give the same decisions."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self._rng = random.Random(faults.seed)

    def roll(self) -> Decision:
        f, r = self.faults, self._rng
        rates = (
            f.error_rate,
            f.decline_rate,
            f.async_rate,
            f.drop_response_rate,
            f.timeout_rate,
            f.callback_loss_rate,
            f.callback_duplicate_rate,
        )
        return Decision(*(r.random() < rate for rate in rates))
