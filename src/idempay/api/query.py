"""Strict query strings: a parameter a route does not declare is 400, so a typo such as
`?stauts=FAILED` cannot silently widen a list to every payment."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError


def only_query(*allowed: str) -> Any:
    """A route dependency refusing every query parameter but `allowed`."""
    known = frozenset(allowed)

    async def check(request: Request) -> None:
        unknown = sorted(set(request.query_params) - known)
        if unknown:
            raise RequestValidationError(
                [
                    {
                        "loc": ("query", n),
                        "msg": "unknown query parameter",
                        "type": "extra_forbidden",
                    }
                    for n in unknown
                ]
            )

    return Depends(check)
