"""The http tool's direct path (tools.http_direct) sends what the client's path sends.

Every request below goes to the local echo server twice: once as the tool sends it
(straight to the shared client's transport) and once through the same tool with the
direct path switched off (`httpx.Client.request`, what the tool did before). What the
server received must be the same, header for header.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.settings import Settings
from noetl_celery.tools.base import ToolOutcome
from noetl_celery.tools.services import ToolServices
from tests.integration.tools.conftest import run_with, serving

REQUESTS: list[dict[str, Any]] = [
    {"params": {"a": 1, "flag": True, "many": [1, 2], "skip": None, "text": "a b&c/é"}},
    {"method": "POST", "payload": {"x": 1, "nested": {"y": [1, 2]}}, "params": {"q": "1"}},
    {
        "method": "PUT",
        "headers": {"Content-Type": "application/x-www-form-urlencoded"},
        "payload": {"name": "n", "on": False},
    },
    {
        "method": "PATCH",
        "headers": {"Content-Type": "text/plain", "X-Trace": "t-1", "User-Agent": "mine/1"},
        "body": "raw text",
    },
    {"method": "DELETE", "headers": {"Accept": "application/json", "Authorization": "Bearer t"}},
]


@pytest.fixture
def client_path(tmp_path: Path) -> Iterator[ToolServices]:
    """Tool services whose http tool always goes through `httpx.Client.request`."""
    svc = ToolServices(Settings(home=tmp_path, http_timeout_seconds=10.0))
    svc.http_direct = lambda verify=True: None  # type: ignore[method-assign]
    yield svc
    svc.close()


def _received(svc: ToolServices, base: str, request: Mapping[str, Any]) -> dict[str, Any]:
    out: ToolOutcome = run_with(svc, "http", {"url": f"{base}/echo", **request})
    assert out.ok, out.error
    echoed = dict(out.data["data"])
    assert out.data["url"].startswith(f"{base}/echo")
    return echoed


@pytest.mark.parametrize("request_config", REQUESTS, ids=lambda r: r.get("method", "GET"))
def test_the_server_receives_the_same_request_on_both_paths(
    http_services: ToolServices,
    client_path: ToolServices,
    http_base: str,
    request_config: dict[str, Any],
) -> None:
    assert http_services.http_direct() is not None  # the direct path is the one tested
    direct = _received(http_services, http_base, request_config)
    via_client = _received(client_path, http_base, request_config)
    assert direct == via_client
    assert direct["method"] == request_config.get("method", "GET")


def test_the_outcome_is_the_same_on_both_paths(
    http_services: ToolServices, client_path: ToolServices, http_base: str
) -> None:
    for path in ("/json", "/missing", "/limited", "/boom", "/empty", "/text"):
        direct = run_with(http_services, "http", {"url": f"{http_base}{path}"})
        via_client = run_with(client_path, "http", {"url": f"{http_base}{path}"})
        assert direct.ok == via_client.ok, path
        for outcome in (direct, via_client):
            elapsed = outcome.data.pop("elapsed")
            assert isinstance(elapsed, float) and 0 <= elapsed < 5, (path, elapsed)
            headers = outcome.data["headers"]
            headers.pop("date", None)  # the server's clock moved on between the two
            outcome.detail["http"]["headers"].pop("date", None)
        assert direct.data == via_client.data, path
        assert direct.error == via_client.error, path
        assert direct.detail == via_client.detail, path


def _clear_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy from the machine running the tests: each test names its own."""
    for scheme in ("http", "https", "all", "no"):
        monkeypatch.delenv(f"{scheme}_proxy", raising=False)
        monkeypatch.delenv(f"{scheme.upper()}_PROXY", raising=False)


def test_a_proxy_in_the_environment_sends_every_request_through_the_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, http_base: str
) -> None:
    """With a proxy named, only the client knows which requests it routes (per scheme,
    minus NO_PROXY): the services hand out no transport to send on directly."""
    _clear_proxies(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with ToolServices(Settings(home=tmp_path, http_timeout_seconds=10.0)) as svc:
        assert svc.http_direct() is None
        out = run_with(svc, "http", {"url": f"{http_base}/json"})  # http: not proxied
        assert out.ok, out.error
        assert isinstance(out.data["elapsed"], float)


class _Proxy(BaseHTTPRequestHandler):
    """A forward proxy that answers for every host: it says which URL it was asked for."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"proxied": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_proxy_in_the_environment_carries_the_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clear_proxies(monkeypatch)
    with serving(_Proxy) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.setenv("http_proxy", proxy)
        with ToolServices(Settings(home=tmp_path, http_timeout_seconds=10.0)) as svc:
            out = run_with(svc, "http", {"url": "http://api.example.invalid/v1/x?page=2"})
    assert out.ok, out.error
    assert out.data["data"] == {"proxied": "http://api.example.invalid/v1/x?page=2"}


def test_no_proxy_alone_keeps_the_direct_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clear_proxies(monkeypatch)
    monkeypatch.setenv("NO_PROXY", "internal.example")
    with ToolServices(Settings(home=tmp_path)) as svc:
        assert svc.http_direct() is not None
        assert svc.http_direct(verify=False) is not svc.http_direct()


def test_a_failed_body_read_is_a_connection_error_not_a_crash(
    run_http: Any, http_base: str
) -> None:
    """The direct path reads the body itself: a timeout while the server is still
    silent is reported as the client's path reports it."""
    out = run_http({"url": f"{http_base}/slow", "params": {"seconds": 1}, "timeout": 0.2})
    assert not out.ok and out.error is not None
    assert out.error.kind == "timeout" and out.error.retryable is True
