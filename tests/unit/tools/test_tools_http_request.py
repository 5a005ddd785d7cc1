"""Request building and header parsing, without I/O (the wire is tested in integration)."""

from __future__ import annotations

import datetime as dt

import pytest

from noetl_celery.tools.http_request import RequestConfigError, as_bool, build_request
from noetl_celery.tools.http_tool import parse_retry_after, status_kind


def test_get_merges_params_and_plain_data_into_query() -> None:
    spec = build_request(
        {
            "url": "http://x/a",
            "params": {"a": 1, "skip": None, "on": True},
            "data": {"b": "2", "off": False},
        }
    )
    assert spec.method == "GET"
    assert spec.params == {"a": 1, "on": "true", "b": "2", "off": "false"}
    assert not spec.has_json and spec.content is None and spec.form is None


def test_get_unified_data_uses_only_its_query() -> None:
    spec = build_request(
        {
            "endpoint": "http://x",
            "method": "delete",
            "data": {"query": {"q": 1}, "body": {"ignored": True}},
        }
    )
    assert spec.method == "DELETE" and spec.params == {"q": 1}


def test_post_body_sources() -> None:
    unified = build_request(
        {
            "url": "http://x",
            "method": "POST",
            "params": {"k": "v"},
            "data": {"body": {"a": 1}, "query": {"q": 2}},
        }
    )
    assert unified.json_body == {"a": 1} and unified.params == {"k": "v", "q": 2}
    plain = build_request({"url": "http://x", "method": "PUT", "data": {"query": "{ users }"}})
    assert plain.json_body == {"query": "{ users }"} and plain.params == {}  # GraphQL stays body
    for alias in ("payload", "body", "json"):
        spec = build_request({"url": "http://x", "method": "PATCH", alias: [1, 2]})
        assert spec.json_body == [1, 2]


def test_post_form_and_text_bodies() -> None:
    form = build_request(
        {
            "url": "http://x",
            "method": "POST",
            "headers": {"Content-Type": "application/x-www-form-urlencoded"},
            "payload": {"a": 1, "b": True, "c": None},
        }
    )
    assert form.form == {"a": 1, "b": "true"} and not form.has_json
    text = build_request({"url": "http://x", "method": "POST", "payload": "raw text"})
    assert text.content == "raw text" and not text.has_json


def test_missing_url() -> None:
    with pytest.raises(RequestConfigError, match="needs `url`"):
        build_request({"method": "GET"})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, True),
        ("", True),
        ("false", False),
        ("False", False),
        ("0", False),
        ("no", False),
        ("true", True),
        (False, False),
        (0, False),
        (1, True),
    ],
)
def test_as_bool(value: object, expected: bool) -> None:
    assert as_bool(value, True) is expected


def test_retry_after_parsing() -> None:
    now = dt.datetime(2024, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
    assert parse_retry_after("7") == 7
    assert parse_retry_after(" 1.2 ") == 2
    assert parse_retry_after("Mon, 01 Jan 2024 12:00:30 GMT", now=now) == 30
    assert parse_retry_after("Mon, 01 Jan 2024 11:00:00 GMT", now=now) == 0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (429, "rate_limit"),
        (401, "auth"),
        (403, "auth"),
        (404, "not_found"),
        (408, "timeout"),
        (400, "client_error"),
        (422, "client_error"),
        (302, "client_error"),
        (500, "server_error"),
        (503, "server_error"),
    ],
)
def test_status_kinds(code: int, kind: str) -> None:
    assert status_kind(code) == kind
