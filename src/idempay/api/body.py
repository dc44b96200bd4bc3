"""Reading a JSON request body: size (413, declared and streamed), media type (415), syntax (400),
then a strict model (400). A body reaches a service only after passing all four."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from idempay.domain.errors import IdempayError, InvalidRequest

M = TypeVar("M", bound=BaseModel)

# Models whose JSON schema the OpenAPI document must carry (see body_doc and api/openapi.py).
DOCUMENTED: dict[str, type[BaseModel]] = {}


class PayloadTooLarge(IdempayError):
    code = "PAYLOAD_TOO_LARGE"


class UnsupportedMediaType(IdempayError):
    code = "UNSUPPORTED_MEDIA_TYPE"


@dataclass(frozen=True, slots=True)
class Body(Generic[M]):
    """A validated body (None when it was empty and allowed to be) and the canonical JSON of what
    was sent, "" for no body: the input of the Idempotency-Key fingerprint."""

    value: M | None
    canonical: str


def body_doc(model: type[BaseModel], *, required: bool) -> dict[str, Any]:
    """`openapi_extra` for a route that reads `model` with `parse_body`."""
    DOCUMENTED[model.__name__] = model
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": ref}}}}


async def parse_body(
    request: Request, model: type[M], *, max_bytes: int, required: bool
) -> Body[M]:
    raw = await read_limited(request, max_bytes)
    if not raw:
        if required:
            raise InvalidRequest("a JSON body is required")
        return Body(None, "")
    _check_media_type(request.headers.get("content-type"))
    value = _decode(raw)
    try:
        parsed = model.model_validate(value)
    except ValidationError as e:
        _invalid(e)
    return Body(parsed, json.dumps(value, sort_keys=True, separators=(",", ":")))


async def read_limited(request: Request, max_bytes: int) -> bytes:
    """The raw body, refused with 413 past `max_bytes` (declared or actually streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"the body is over {max_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():  # a missing or lying Content-Length is counted here
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"the body is over {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _check_media_type(content_type: str | None) -> None:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise UnsupportedMediaType(f"the body must be application/json, not {media or 'untyped'}")


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise InvalidRequest("the JSON body is nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, over-long integer literals
        raise InvalidRequest(f"the body is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise InvalidRequest("the body must be a JSON object")
    return value


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _invalid(e: ValidationError) -> NoReturn:
    errors = [{**err, "loc": ("body", *err["loc"])} for err in e.errors(include_url=False)]
    raise RequestValidationError(errors) from None
