"""The http tool against a real local HTTP server (no mocked transport)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from noetl_celery.tools.base import ToolOutcome
from noetl_celery.tools.services import ToolServices

RunTool = Callable[..., ToolOutcome]


def _error(out: ToolOutcome) -> dict[str, Any]:
    assert not out.ok and out.error is not None, out
    return out.error.to_json()  # as `output.error` shows it


def test_get_json(run_http: RunTool, http_base: str) -> None:
    out = run_http({"url": f"{http_base}/json"})
    assert out.ok, out.error
    assert out.data["status_code"] == 200
    assert out.data["data"] == {"ok": True, "items": [1, 2, 3]}
    assert out.data["url"] == f"{http_base}/json"
    assert out.data["headers"]["content-type"] == "application/json"
    assert isinstance(out.data["elapsed"], float) and out.data["elapsed"] >= 0
    assert out.detail["http"]["status"] == 200
    assert out.detail["http"]["headers"] == out.data["headers"]


def test_text_and_json_looking_text(run_http: RunTool, http_base: str) -> None:
    assert run_http({"endpoint": f"{http_base}/text"}).data["data"] == "hello there"
    assert run_http({"url": f"{http_base}/jsontext"}).data["data"] == {"looks": "like json"}
    empty = run_http({"url": f"{http_base}/empty"})
    assert empty.ok and empty.data["status_code"] == 204 and empty.data["data"] is None


def test_404(run_http: RunTool, http_base: str) -> None:
    out = run_http({"url": f"{http_base}/missing"})
    error = _error(out)
    assert error == {
        "kind": "not_found",
        "message": "HTTP 404: Not Found",
        "retryable": False,
        "code": "HTTP_404",
        "status_code": 404,
    }
    assert out.data["status_code"] == 404 and out.data["data"] == {"error": "no such thing"}
    assert out.detail["http"]["status"] == 404


def test_429_with_retry_after_seconds(run_http: RunTool, http_base: str) -> None:
    error = _error(run_http({"url": f"{http_base}/limited"}))
    assert error["kind"] == "rate_limit" and error["retryable"] is True
    assert error["retry_after"] == 7 and error["code"] == "HTTP_429"
    assert error["message"] == "HTTP 429: Too Many Requests"


def test_429_with_retry_after_date(run_http: RunTool, http_base: str) -> None:
    error = _error(run_http({"url": f"{http_base}/limited", "params": {"date": True}}))
    assert isinstance(error["retry_after"], int) and 27 <= error["retry_after"] <= 31


def test_500(run_http: RunTool, http_base: str) -> None:
    out = run_http({"url": f"{http_base}/boom", "method": "POST", "payload": {"a": 1}})
    error = _error(out)
    assert error["kind"] == "server_error" and error["retryable"] is True
    assert error["message"] == "HTTP 500: Internal Server Error"
    assert "retry_after" not in error
    assert out.data["data"] == "internal kaboom"


@pytest.mark.parametrize(
    ("code", "kind", "retryable"),
    [
        (400, "client_error", False),
        (401, "auth", False),
        (403, "auth", False),
        (408, "timeout", True),
        (418, "client_error", False),
        (422, "client_error", False),
        (502, "server_error", True),
        (503, "server_error", True),
    ],
)
def test_status_kinds(
    run_http: RunTool, http_base: str, code: int, kind: str, retryable: bool
) -> None:
    error = _error(run_http({"url": f"{http_base}/status/{code}"}))
    assert (error["kind"], error["retryable"], error["status_code"]) == (kind, retryable, code)


def test_timeout(run_http: RunTool, http_base: str) -> None:
    started = time.monotonic()
    error = _error(run_http({"url": f"{http_base}/slow", "params": {"seconds": 2}, "timeout": 0.3}))
    assert time.monotonic() - started < 1.5
    assert error["kind"] == "timeout" and error["retryable"] is True
    assert "timed out after 0.3s" in str(error["message"])


def test_default_timeout_comes_from_settings(
    run_http: RunTool, http_base: str, http_services: ToolServices
) -> None:
    assert http_services.settings.http_timeout_seconds == 10.0
    assert run_http({"url": f"{http_base}/slow", "params": {"seconds": 0.1}}).ok


def test_connection_refused(run_http: RunTool) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    error = _error(run_http({"url": f"http://127.0.0.1:{port}/x?api_key=Key-Leak-9911"}))
    assert error["kind"] == "connection" and error["retryable"] is True
    assert "ConnectError" in str(error["message"])
    assert "Key-Leak-9911" not in str(error["message"]) and "api_key=***" in str(error["message"])


def test_params_are_sent_on_post(run_http: RunTool, http_base: str) -> None:
    out = run_http(
        {
            "url": f"{http_base}/echo",
            "method": "post",
            "params": {"a": 1, "flag": True, "off": False, "skip": None},
            "payload": {"x": 1, "nested": {"y": [1, 2]}},
        }
    )
    assert out.ok, out.error
    echo = out.data["data"]
    assert echo["method"] == "POST"
    assert echo["query"] == {"a": "1", "flag": "true", "off": "false"}
    assert echo["json"] == {"x": 1, "nested": {"y": [1, 2]}}
    assert echo["content_type"] == "application/json"


def test_get_data_goes_to_query(run_http: RunTool, http_base: str) -> None:
    plain = run_http({"url": f"{http_base}/echo", "params": {"p": "1"}, "data": {"d": "2"}})
    assert plain.data["data"]["query"] == {"p": "1", "d": "2"}
    unified = run_http(
        {"url": f"{http_base}/echo", "method": "DELETE", "data": {"query": {"q": "3"}}}
    )
    assert unified.data["data"]["method"] == "DELETE"
    assert unified.data["data"]["query"] == {"q": "3"}


def test_post_unified_data(run_http: RunTool, http_base: str) -> None:
    out = run_http(
        {
            "url": f"{http_base}/echo",
            "method": "PUT",
            "data": {"query": {"page": 2}, "body": {"name": "n"}},
            "payload": {"no": 1},
        }
    )
    echo = out.data["data"]
    assert echo["method"] == "PUT" and echo["query"] == {"page": "2"}
    assert echo["json"] == {"name": "n"}


def test_form_body(run_http: RunTool, http_base: str) -> None:
    out = run_http(
        {
            "url": f"{http_base}/echo",
            "method": "POST",
            "headers": {"Content-Type": "application/x-www-form-urlencoded"},
            "body": {"user": "u", "remember": True},
        }
    )
    echo = out.data["data"]
    assert echo["form"] == {"user": "u", "remember": "true"} and echo["json"] is None


def test_text_body_and_headers(run_http: RunTool, http_base: str) -> None:
    out = run_http(
        {
            "url": f"{http_base}/echo",
            "method": "PATCH",
            "payload": "plain words",
            "headers": {"X-Trace": "abc", "Content-Type": "text/plain", "X-None": None},
        }
    )
    echo = out.data["data"]
    assert echo["body"] == "plain words" and echo["headers"]["x-trace"] == "abc"
    assert "x-none" not in echo["headers"]


def test_redirects(run_http: RunTool, http_base: str) -> None:
    error = _error(run_http({"url": f"{http_base}/redirect"}))
    assert error["kind"] == "client_error" and error["status_code"] == 302
    followed = run_http({"url": f"{http_base}/redirect", "follow_redirects": "true"})
    assert followed.ok and followed.data["data"]["ok"] is True


def test_config_errors(run_http: RunTool) -> None:
    missing = _error(run_http({"method": "GET"}))
    assert missing["kind"] == "config_error" and "needs `url`" in str(missing["message"])
    bad_scheme = _error(run_http({"url": "ftp://example.invalid/x"}))
    assert bad_scheme["kind"] == "config_error"


def test_one_client_for_all_calls(
    run_http: RunTool, http_base: str, http_services: ToolServices
) -> None:
    client = http_services.http_client()
    started = time.monotonic()
    for _ in range(50):
        assert run_http({"url": f"{http_base}/json"}).ok
    # ~20 ms per call if a client were built per call; keep-alive makes 50 calls fast
    assert time.monotonic() - started < 1.0
    assert http_services.http_client() is client
    assert run_http({"url": f"{http_base}/json", "verify_ssl": False}).ok
    assert http_services.http_client(verify=False) is not client


def test_secret_in_query_is_masked_in_result_url(run_http: RunTool, http_base: str) -> None:
    out = run_http({"url": f"{http_base}/echo", "params": {"api_key": "Api-Token-Secret-77"}})
    assert out.ok, out.error
    assert out.data["data"]["query"] == {"api_key": "Api-Token-Secret-77"}  # sent as asked
    assert "Api-Token-Secret-77" not in out.data["url"] and "api_key=***" in out.data["url"]


def test_a_cookie_never_rides_along_on_another_request(run_http: RunTool, http_base: str) -> None:
    """The worker's threads share one HTTP client: a session cookie that one execution's
    response set must not be sent with any later request (another execution's, another
    playbook's). A playbook that needs a cookie sends it as a header."""
    assert run_http({"url": f"{http_base}/login"}).ok
    echoed = run_http({"url": f"{http_base}/echo"}).data["data"]["headers"]
    assert "cookie" not in echoed, echoed
    sent = run_http({"url": f"{http_base}/echo", "headers": {"Cookie": "session=mine"}})
    assert sent.data["data"]["headers"]["cookie"] == "session=mine"
