"""Schemathesis against a real `noetl-celery serve`'s /openapi.json (issue 30): for every
operation, a bounded number of requests that fit the schema and of requests that break
it, and not one server error (status >= 500) among them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support import services
from tests.support.server import ServeProcess, embedded_env, serving

pytestmark = pytest.mark.integration

# examples per operation and generation mode (positive: fits the schema, negative: breaks
# it): 34 operations, about 1,100 requests in 20 s here; the table of
# tests/support/bad_requests aims at what random data rarely finds
EXAMPLES = 25


@pytest.fixture(scope="module")
def server(template_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with services.cloned_database(template_db) as name:
        env = embedded_env(services.sqlalchemy_url(name), tmp_path_factory.mktemp("home"))
        with serving(env) as served:
            yield served


def fuzz(base_url: str, examples: int) -> tuple[int, list[str]]:
    """(requests sent, a curl command for each answered with a server error)."""
    import hypothesis
    import requests
    import schemathesis
    from schemathesis import GenerationMode
    from schemathesis.core.result import Err

    schema = schemathesis.openapi.from_dict(httpx.get(f"{base_url}/openapi.json").json())
    sent: list[int] = []
    errors: list[str] = []
    with requests.Session() as session:

        def call(case: Any) -> None:
            response = case.call(base_url=base_url, session=session, timeout=30)
            sent.append(response.status_code)
            if response.status_code >= 500:
                errors.append(f"{response.status_code} {case.as_curl_command()}")

        for result in schema.get_all_operations():
            if isinstance(result, Err):  # the schema serve publishes must be usable
                raise result.err()
            operation = result.ok()
            for mode in GenerationMode:
                run = hypothesis.given(operation.as_strategy(generation_mode=mode))(call)
                try:
                    hypothesis.settings(
                        max_examples=examples,
                        deadline=None,
                        database=None,
                        derandomize=True,
                        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
                        suppress_health_check=list(hypothesis.HealthCheck),
                    )(run)()
                except hypothesis.errors.Unsatisfiable:
                    # nothing to break: an operation without parameters or body has no
                    # negative case
                    assert mode is GenerationMode.NEGATIVE, operation.label
    return len(sent), errors


def test_schemathesis_finds_no_server_error(server: ServeProcess) -> None:
    began = time.monotonic()
    sent, errors = fuzz(server.url, EXAMPLES)
    took = time.monotonic() - began
    assert errors == []
    assert sent >= 1000, sent  # every operation was reached, not skipped
    assert took < 120, f"{sent} requests took {took:.0f}s"
    assert "Traceback" not in server.tail(200)


# against a running serve: python -m tests.integration.web.test_openapi_fuzz URL [EXAMPLES]
if __name__ == "__main__":
    import sys

    count, found = fuzz(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else EXAMPLES)
    print(count, "requests;", len(found), "server errors")
    print("\n".join(found[:20]))
