"""Schemathesis against the app's own live schema: every operation, with generated inputs, as an
operator with a token over a small seeded world. No answer may be a 500, and every documented
answer must match the schema. Bounded (MAX_EXAMPLES per operation) to stay within minutes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from portal.wsgi import application

# Generated cases per operation: 40 operations x 15 ran in 211 s on a two-core machine; its first
# runs found two bugs (a 500 on a multipart body without a boundary; a field missing
# from an answer). More examples find little more and cost linearly.
MAX_EXAMPLES = 15
AUTH: dict[str, str] = {}


@pytest.fixture
def same_connection() -> Iterator[None]:
    """Keep the test's database connection (and its transaction) open across the WSGI requests, as
    Django's test client does: the handler's close_old_connections would otherwise close it."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def api_schema(world, people, same_connection):  # type: ignore[no-untyped-def]
    AUTH["Authorization"] = f"Token {people['operator'].secret}"
    loaded = schemathesis.openapi.from_wsgi("/api/v1/schema/", application, headers=dict(AUTH))
    # Revoking tokens would revoke the one the fuzzing runs with; tests/api/test_tokens.py covers it.
    return loaded.exclude(method="DELETE", path_regex=r"/tokens/")


schema = schemathesis.pytest.from_fixture("api_schema")


# 60-65 s on an idle 2-core machine; it passed the default 300 s in a CI run that ran twice as slow.
@pytest.mark.timeout(900)
@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_answers_within_its_schema(case: schemathesis.Case) -> None:
    case.call_and_validate(headers=dict(AUTH), checks=[not_a_server_error, response_schema_conformance])
