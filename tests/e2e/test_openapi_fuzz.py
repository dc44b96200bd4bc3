"""Schemathesis against /openapi.json of a real `idempay serve`: whatever it generates, valid or
not, the API answers without a 5xx and as the document says (status, media type, schema)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.e2e.server import Server, cli

EXAMPLES = 40  # per operation and mode: the whole run stays well under a minute
UNPARAMETERISED = {"/healthz", "/metrics"}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    negative_data_rejection,
]


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir: Path = tmp_path_factory.mktemp("fuzz")
    channels = {
        "scripted": {"kind": "scripted"},
        "declines": {"kind": "scripted", "default": "DECLINE"},
    }
    srv = Server(f"sqlite:///{workdir / 'fuzz.db'}", workdir, channels=channels).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def fuzz_key(fuzz_server: Server) -> str:
    created = cli("merchant", "create", "fuzzer", database_url=fuzz_server.database_url)
    assert created.returncode == 0, created.stderr
    key: str = json.loads(created.stdout)["api_key"]
    return key


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_generated_request_gets_a_5xx_or_an_undocumented_answer(
    fuzz_server: Server, fuzz_key: str, mode: GenerationMode
) -> None:
    schema = schemathesis.openapi.from_url(f"{fuzz_server.url}/openapi.json")
    auth = {"Authorization": f"Bearer {fuzz_key}"}
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def answers_as_documented(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=auth, checks=CHECKS, timeout=30)

        try:
            answers_as_documented()
        except Unsatisfiable:  # nothing to negate: no parameter, no body
            assert mode is GenerationMode.NEGATIVE and operation.path in UNPARAMETERISED
