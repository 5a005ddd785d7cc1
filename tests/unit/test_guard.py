"""The door's decisions (web.guard), as tables: which Host names pass, which requests count
as cross-site, which content types each route reads, what a body's size allows."""

from __future__ import annotations

import pytest

from noetl_celery.web.guard import (
    CONTENT_POLICY,
    GuardPolicy,
    accepted_types,
    cross_site,
    host_allowed,
    host_name,
    refusal,
    with_security_headers,
)

OPEN = GuardPolicy.build(credentials=False, allowed_hosts=(), cors_origins=(), max_body_bytes=1000)
DEPLOYED = GuardPolicy.build(
    credentials=True,
    allowed_hosts=("noetl.example.com", "*.internal.example"),
    cors_origins=("http://gui.example:3001/",),
    max_body_bytes=1000,
)
WITH_TOKEN = GuardPolicy.build(
    credentials=True, allowed_hosts=(), cors_origins=(), max_body_bytes=1000
)


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("127.0.0.1:8082", "127.0.0.1"),
        ("LOCALHOST", "localhost"),
        ("[::1]:8082", "::1"),
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("api.example.com:443", "api.example.com"),
        ("", ""),
    ],
)
def test_host_name(host: str, name: str) -> None:
    assert host_name(host) == name


@pytest.mark.parametrize(
    ("host", "policy", "allowed"),
    [
        ("127.0.0.1:8082", OPEN, True),
        ("127.0.0.2", OPEN, True),
        ("localhost:1", OPEN, True),
        ("[::1]:8082", OPEN, True),
        ("rebind.evil.example", OPEN, False),
        ("rebind.evil.example:8082", OPEN, False),
        ("localhost.evil.example", OPEN, False),
        ("127.0.0.1.evil.example", OPEN, False),
        ("10.0.0.5:8082", OPEN, False),
        ("", OPEN, False),
        ("noetl.example.com", DEPLOYED, True),
        ("NOETL.example.com:8443", DEPLOYED, True),
        ("a.internal.example", DEPLOYED, True),
        ("internal.example", DEPLOYED, False),
        ("evil.example", DEPLOYED, False),
        ("127.0.0.1:8082", DEPLOYED, True),
        # credentials and no list: a rebinding page has no credentials to send
        ("anything.example", WITH_TOKEN, True),
    ],
)
def test_host_allowed(host: str, policy: GuardPolicy, allowed: bool) -> None:
    assert host_allowed(host, policy) is allowed


HOST = "127.0.0.1:8082"


@pytest.mark.parametrize(
    ("headers", "policy", "refused"),
    [
        ({}, OPEN, False),  # curl, NoETL's CLI, the Python client
        ({"sec-fetch-site": "same-origin", "origin": f"http://{HOST}"}, OPEN, False),
        ({"sec-fetch-site": "none"}, OPEN, False),  # typed in the address bar
        ({"sec-fetch-site": "cross-site"}, OPEN, True),
        ({"sec-fetch-site": "same-site"}, OPEN, True),  # another port of 127.0.0.1
        ({"origin": "http://127.0.0.2:9000"}, OPEN, True),
        ({"origin": "http://127.0.0.1:9000"}, OPEN, True),  # another port: another origin
        # the same host and port under another scheme: a proxy that ends TLS
        ({"origin": "https://127.0.0.1:8082"}, OPEN, False),
        ({"origin": "https://noetl.example.com"}, OPEN, True),
        ({"origin": "null"}, OPEN, True),
        ({"origin": f"http://{HOST}"}, OPEN, False),
        ({"origin": f"HTTP://{HOST.upper()}"}, OPEN, False),
        # the GUI on a configured CORS origin may act, even from another site
        ({"origin": "http://gui.example:3001", "sec-fetch-site": "cross-site"}, DEPLOYED, False),
        ({"origin": "http://gui.example:3002", "sec-fetch-site": "cross-site"}, DEPLOYED, True),
    ],
)
def test_cross_site(headers: dict[str, str], policy: GuardPolicy, refused: bool) -> None:
    assert cross_site(headers, HOST, policy) is refused


@pytest.mark.parametrize(
    ("origin", "host", "refused"),
    [
        ("https://noetl.example.com", "noetl.example.com", False),  # TLS ended by a proxy
        ("https://noetl.example.com", "noetl.example.com:443", False),
        ("http://noetl.example.com", "noetl.example.com:80", False),
        ("https://noetl.example.com:8443", "noetl.example.com:8443", False),
        ("https://noetl.example.com:8443", "noetl.example.com", True),
        ("https://evil.example.com", "noetl.example.com", True),
        ("https://noetl.example.com.evil.example", "noetl.example.com", True),
    ],
)
def test_the_origin_names_this_host_and_port(origin: str, host: str, refused: bool) -> None:
    assert cross_site({"origin": origin}, host, WITH_TOKEN) is refused


def test_accepted_types_per_route() -> None:
    assert accepted_types("/api/v1/executions") == {"application/json"}
    assert accepted_types("/api/execute") == {"application/json"}
    assert "application/yaml" in accepted_types("/api/v1/catalog")
    assert "text/yaml" in accepted_types("/api/catalog/register")
    assert "text/plain" not in accepted_types("/api/catalog/register")
    assert accepted_types("/executions/x/cancel") == {"application/x-www-form-urlencoded"}


def _asked(method: str, path: str, **headers: str) -> tuple[int, str] | None:
    given = {"host": HOST, **{k.replace("_", "-"): v for k, v in headers.items()}}
    found = refusal(method, path, given, OPEN)
    return None if found is None else (found.status, found.message)


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("GET", "/api/v1/executions", {}, None),
        ("GET", "/api/v1/executions", {"host": "evil.example"}, 400),
        ("POST", "/api/execute", {"host": "evil.example"}, 400),
        # reads pass whatever their origin (CORS decides who may read the answer)
        ("GET", "/api/v1/executions", {"sec_fetch_site": "cross-site"}, None),
        ("POST", "/api/execute", {"content_type": "application/json"}, None),
        ("POST", "/api/execute", {"content_type": "application/json; charset=utf-8"}, None),
        ("POST", "/api/execute", {"content_type": "text/plain", "content_length": "9"}, 415),
        ("POST", "/api/execute", {"content_type": "multipart/form-data; boundary=x"}, 415),
        ("POST", "/api/execute", {"content_type": "application/x-www-form-urlencoded"}, 415),
        ("POST", "/api/execute", {"content_length": "9"}, 415),  # a body of no type
        ("POST", "/api/execute", {"transfer_encoding": "chunked"}, 415),
        ("POST", "/api/v1/executions/e/cancel", {}, None),  # body-less: no type needed
        ("POST", "/api/v1/executions/e/cancel", {"content_length": "0"}, None),
        ("POST", "/api/v1/executions/e/cancel", {"origin": "http://127.0.0.2"}, 403),
        ("DELETE", "/api/v1/schedules/1", {"sec_fetch_site": "cross-site"}, 403),
        ("PUT", "/api/v1/catalog", {"sec_fetch_site": "same-site"}, 403),
        ("POST", "/api/v1/catalog", {"content_type": "application/yaml"}, None),
        ("POST", "/api/v1/catalog", {"content_type": "text/plain"}, 415),
        (
            "POST",
            "/executions/e/cancel",
            {"content_type": "application/x-www-form-urlencoded"},
            None,
        ),
        ("POST", "/executions/e/cancel", {"content_type": "text/plain"}, 415),
        ("POST", "/executions/e/cancel", {"content_type": "application/json"}, 415),
        (
            "POST",
            "/api/execute",
            {"content_type": "application/json", "content_length": "1001"},
            413,
        ),
        ("GET", "/api/v1/executions", {"content_length": "1001"}, 413),
        (
            "POST",
            "/api/execute",
            {"content_type": "application/json", "content_length": "1000"},
            None,
        ),
        ("POST", "/api/execute", {"content_type": "application/json", "content_length": "-1"}, 400),
        ("POST", "/api/execute", {"content_type": "application/json", "content_length": "x"}, 400),
    ],
)
def test_refusal(method: str, path: str, headers: dict[str, str], status: int | None) -> None:
    answer = _asked(method, path, **headers)
    assert (answer and answer[0]) == status, answer
    if answer is not None:
        assert "\n" not in answer[1] and answer[1]


def test_a_cross_site_refusal_comes_before_the_content_type() -> None:
    answer = _asked("POST", "/api/execute", origin="http://evil.example", content_type="text/plain")
    assert answer is not None and answer[0] == 403


def test_security_headers_are_added_unless_the_answer_set_its_own() -> None:
    added = dict(with_security_headers([(b"content-type", b"text/html")]))
    assert added[b"x-frame-options"] == b"DENY"
    assert added[b"content-security-policy"] == CONTENT_POLICY.encode()
    assert b"frame-ancestors 'none'" in added[b"content-security-policy"]
    assert b"script-src 'self'" in added[b"content-security-policy"]
    own = dict(with_security_headers([(b"content-security-policy", b"frame-ancestors 'none'")]))
    assert own[b"content-security-policy"] == b"frame-ancestors 'none'"
    assert own[b"x-content-type-options"] == b"nosniff"
