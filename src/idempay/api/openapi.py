"""The OpenAPI document at /openapi.json: FastAPI's, plus the request and resource schemas the
routes reference, the limits of this deployment (maximum amount, configured channels), and none of
FastAPI's 422 validation answers (validation is 400 here)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from idempay.api import schemas
from idempay.api.body import DOCUMENTED
from idempay.bootstrap import Container
from idempay.domain.money import MAX_MINOR

RESOURCES: dict[str, type[BaseModel]] = {
    m.__name__: m
    for m in (
        schemas.Payment,
        schemas.PaymentList,
        schemas.OpsPayment,
        schemas.Problem,
        schemas.Health,
    )
}


def register(*models: type[BaseModel]) -> None:
    """Add resource models (referenced with schemas.ok("Name", ...)) to the document."""
    RESOURCES.update({m.__name__: m for m in models})


def install(app: FastAPI, container: Container) -> None:
    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes
            )
            _add_components(doc)
            _drop_framework_422(doc)
            _limit(doc, container.settings.max_amount, sorted(container.channels))
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = build  # type: ignore[method-assign]


def _add_components(doc: dict[str, Any]) -> None:
    components = doc.setdefault("components", {}).setdefault("schemas", {})
    models = [(n, m, "validation") for n, m in DOCUMENTED.items()]
    models += [(n, m, "serialization") for n, m in RESOURCES.items()]
    for name, model, mode in models:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}", mode=mode)  # type: ignore[arg-type]
        components.update(schema.pop("$defs", {}))
        components[name] = schema


def _drop_framework_422(doc: dict[str, Any]) -> None:
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            answer = operation.get("responses", {}).get("422")
            if answer is not None and "HTTPValidationError" in str(answer):
                del operation["responses"]["422"]
    schemas_ = doc.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas_.pop(name, None)


def _limit(doc: dict[str, Any], max_amount: int, channels: list[str]) -> None:
    """Amounts are bounded by IDEMPAY_MAX_AMOUNT and channels are the configured ones."""
    components = doc["components"]["schemas"]
    for name in DOCUMENTED:
        _cap(components[name], min(max_amount, MAX_MINOR))
    charge = components.get("ChargeRequest", {}).get("properties", {})
    if channels and "channel" in charge:
        charge["channel"]["enum"] = channels


def _cap(node: Any, maximum: int) -> None:
    if isinstance(node, dict):
        if node.get("type") == "integer" and node.get("maximum") == MAX_MINOR:
            node["maximum"] = maximum
        for value in node.values():
            _cap(value, maximum)
    elif isinstance(node, list):
        for value in node:
            _cap(value, maximum)
