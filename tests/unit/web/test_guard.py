"""The pages' POST guard: only a form from a page of the same host passes."""

from __future__ import annotations

import pytest

from noetl_celery.web.pages.actions import same_origin

HOST = "127.0.0.1:5555"


@pytest.mark.parametrize(
    ("headers", "allowed"),
    [
        ({"sec-fetch-site": "same-origin"}, True),
        ({"sec-fetch-site": "cross-site", "origin": f"http://{HOST}"}, False),
        ({"sec-fetch-site": "same-site"}, False),
        ({"sec-fetch-site": "none"}, False),
        ({"origin": f"http://{HOST}"}, True),
        ({"origin": "http://evil.example"}, False),
        ({"origin": "null"}, False),
        ({"referer": f"http://{HOST}/executions/1"}, True),
        ({"referer": f"http://admin:pw@{HOST}/executions/1"}, True),
        ({"referer": "http://127.0.0.1:5556/"}, False),
        ({"origin": "http://evil.example", "referer": f"http://{HOST}/"}, False),
        ({}, False),
    ],
)
def test_same_origin(headers: dict[str, str], allowed: bool) -> None:
    assert same_origin(headers, HOST) is allowed
