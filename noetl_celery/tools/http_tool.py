"""`kind: http`: one HTTP request through the worker's shared httpx client (straight to
its transport unless it follows redirects: tools.http_direct)."""

from __future__ import annotations

import datetime as dt
import email.utils
import http
import json
import math
import time
from collections.abc import Callable
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from noetl_celery import tracing
from noetl_celery.models.outcome import ErrorKind
from noetl_celery.tools import http_direct, keyed_pacing
from noetl_celery.tools.base import ToolCall, ToolOutcome
from noetl_celery.tools.http_pacing import Ticket, host_key, route_key
from noetl_celery.tools.http_request import (
    RequestConfigError,
    RequestSpec,
    as_bool,
    build_request,
)
from noetl_celery.tools.jsonable import to_jsonable

# a pacer's wait shorter than this is not an event of the request's span (its lock)
PACER_WAIT_SHOWN_SECONDS = 0.001


class HttpTool:
    kind: ClassVar[str] = "http"
    raw_fields: ClassVar[frozenset[str]] = frozenset()

    def run(self, call: ToolCall) -> ToolOutcome:
        redact = call.services.redactor.redact
        try:
            spec = build_request(call.config)
        except RequestConfigError as exc:
            return ToolOutcome.failure("config_error", str(exc))
        config = call.config
        verify = as_bool(config.get("verify_ssl", config.get("verify")), True)
        follow = as_bool(config.get("follow_redirects"), False)
        # 0 in the settings means "no timeout", as for httpx
        timeout = call.timeout or call.services.settings.http_timeout_seconds or None
        # wait this host's turn (tools.http_pacing): not at all unless it answered 429
        pacer = call.services.http_pacer
        if tracing.enabled():
            return self._traced(call, spec, timeout, follow, verify, redact)
        ticket = pacer.wait(host_key(spec.url), route_key(spec.url))
        return self._send(call, spec, timeout, follow, verify, redact, ticket)

    def _traced(
        self,
        call: ToolCall,
        spec: RequestSpec,
        timeout: float | None,
        follow: bool,
        verify: bool,
        redact: Callable[[str], str],
    ) -> ToolOutcome:
        """`run` with tracing on: the pacer's wait an event of the tool's span, the
        request a client span of its own (its URL without query or credentials)."""
        pacer = call.services.http_pacer
        host = host_key(spec.url)
        began = time.monotonic()
        ticket = pacer.wait(host, route_key(spec.url))
        waited = time.monotonic() - began
        if waited >= PACER_WAIT_SHOWN_SECONDS:
            tracing.event("pacer.wait", {"wait_seconds": round(waited, 6), "host": host})
        with tracing.span(f"HTTP {spec.method}", _request_attributes(spec, redact), client=True):
            outcome = self._send(call, spec, timeout, follow, verify, redact, ticket)
            _trace_response(outcome)
            return outcome

    def _send(
        self,
        call: ToolCall,
        spec: RequestSpec,
        timeout: float | None,
        follow: bool,
        verify: bool,
        redact: Callable[[str], str],
        ticket: Ticket,
    ) -> ToolOutcome:
        """Send the request (its pacer's turn taken: `ticket`) and tell the pacer the answer."""
        pacer = call.services.http_pacer
        client = call.services.http_client(verify)
        # no redirects to follow: straight to the client's transport (tools.http_direct)
        direct = None if follow else call.services.http_direct(verify)
        try:
            if direct is not None:
                response, elapsed = http_direct.send(
                    direct,
                    client.headers,
                    spec.method,
                    spec.url,
                    params=spec.params or None,
                    headers=spec.headers,
                    timeout=timeout,
                    body=_body_arguments(spec),
                )
            else:
                response = client.request(
                    spec.method,
                    spec.url,
                    params=spec.params or None,
                    headers=spec.headers,
                    timeout=timeout,
                    follow_redirects=follow,
                    **_body_arguments(spec),
                )
                elapsed = response.elapsed.total_seconds()
        except httpx.HTTPError as exc:
            return _transport_failure(exc, spec, timeout, redact)
        except httpx.InvalidURL as exc:  # not an HTTPError: raised while building the request
            return ToolOutcome.failure("config_error", redact(f"invalid URL {spec.url!r}: {exc}"))
        except (TypeError, ValueError) as exc:  # e.g. a header value httpx cannot encode
            return ToolOutcome.failure("config_error", redact(f"http request rejected: {exc}"))
        outcome = _outcome(response, elapsed, redact)
        retry_after = outcome.error.retry_after if outcome.error is not None else None
        turn = keyed_pacing.current()
        if turn is not None and turn.rate is not None:
            # under a keyed rate_limit its key explains a 429, not the host: the key
            # learns from it (tools.keyed_pacing), the host pacer is left out of it
            keyed = call.services.keyed_pacer
            keyed.observe(turn, response.status_code, retry_after, ticket.sent_at)
        else:
            pacer.observe(ticket, response.status_code, retry_after)
        return outcome


def _request_attributes(spec: RequestSpec, redact: Callable[[str], str]) -> tracing.Attributes:
    """The request's span attributes: no query string and no user info (secrets live
    there), what is left redacted as a stored URL is."""
    try:
        parts = urlsplit(spec.url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return {"http.request.method": spec.method}
    netloc = f"{host}:{port}" if port else host
    attributes: dict[str, tracing.AttributeValue] = {
        "http.request.method": spec.method,
        "url.full": redact(urlunsplit((parts.scheme, netloc, parts.path, "", ""))),
        "server.address": host,
    }
    if port:
        attributes["server.port"] = port
    return attributes


def _trace_response(outcome: ToolOutcome) -> None:
    data = outcome.data if isinstance(outcome.data, dict) else {}
    code = data.get("status_code")
    error = outcome.error
    if error is not None and error.status_code is not None:
        code = error.status_code
    if isinstance(code, int):
        tracing.set_attributes({"http.response.status_code": code})
    if error is not None:
        if error.retry_after is not None:
            tracing.set_attributes({"http.retry_after_seconds": error.retry_after})
        tracing.failed(f"{error.kind}: {error.message}")


def _body_arguments(spec: RequestSpec) -> dict[str, Any]:
    if spec.has_json:
        return {"json": to_jsonable(spec.json_body)}
    if spec.form is not None:
        return {"data": spec.form}
    if spec.content is not None:
        return {"content": spec.content}
    return {}


def _parse_body(response: httpx.Response) -> Any:
    if not response.content:
        return None
    content_type = response.headers.get("content-type", "").lower()
    # without a charset parameter httpx decodes as UTF-8 (its default encoding): the same
    # text without `Response.text` parsing the header with the email package each time
    # (about 1 % of a worker's CPU on an API-bound flow, py-spy on bench.pft_cursor)
    if "charset" in content_type or response.default_encoding != "utf-8":
        text = response.text
    else:
        text = response.content.decode("utf-8", errors="replace")
    # JSON by content type, or a body that looks like a JSON document; scalars like "42"
    # stay text, so a plain-text API never sees its body turn into a number.
    if "json" in content_type or text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def parse_retry_after(value: str | None, now: dt.datetime | None = None) -> int | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0, math.ceil(float(value)))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    now = now or dt.datetime.now(dt.UTC)
    return max(0, math.ceil((when - now).total_seconds()))


def status_kind(code: int) -> ErrorKind:
    if code == 429:
        return "rate_limit"
    if code in (401, 403):
        return "auth"
    if code == 404:
        return "not_found"
    if code == 408:
        return "timeout"
    if code >= 500:
        return "server_error"
    return "client_error"  # other 4xx, and 1xx/3xx that were not followed


def _outcome(response: httpx.Response, elapsed: float, redact: Callable[[str], str]) -> ToolOutcome:
    code = response.status_code
    headers = dict(response.headers)
    result = {
        "status_code": code,
        "headers": headers,
        # a token in the query string must not end up in stored results
        "url": redact(str(response.url)),
        "elapsed": elapsed,
        "data": _parse_body(response),
    }
    http_view = {"status": code, "headers": headers}
    if 200 <= code < 300:
        return ToolOutcome.success(result, http=http_view)
    reason = response.reason_phrase or _phrase(code)
    message = f"HTTP {code}: {reason}"
    if 300 <= code < 400:
        message += " (redirect not followed; set `follow_redirects: true`)"
    return ToolOutcome.failure(
        status_kind(code),
        redact(message),
        data=result,
        retryable=code in (408, 429) or code >= 500,
        detail={"http": http_view},
        code=f"HTTP_{code}",
        status_code=code,
        retry_after=parse_retry_after(response.headers.get("retry-after")),
    )


def _phrase(code: int) -> str:
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return "Unknown Status"


def _transport_failure(
    exc: httpx.HTTPError, spec: RequestSpec, timeout: float | None, redact: Callable[[str], str]
) -> ToolOutcome:
    where = f"{spec.method} {spec.url}"
    text = str(exc) or "no detail"
    if isinstance(exc, httpx.TimeoutException):
        limit = f" after {timeout:g}s" if timeout else ""
        message = f"request timed out{limit} ({type(exc).__name__}): {where}"
        return ToolOutcome.failure("timeout", redact(message), retryable=True)
    if isinstance(exc, httpx.UnsupportedProtocol):
        return ToolOutcome.failure("config_error", redact(f"invalid URL {spec.url!r}: {text}"))
    if isinstance(exc, httpx.TooManyRedirects):
        return ToolOutcome.failure("client_error", redact(f"{text}: {where}"))
    # connect errors, connections dropped mid-response: the remote end may come back
    retryable = isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError)
    message = f"{type(exc).__name__}: {text} ({where})"
    return ToolOutcome.failure("connection", redact(message), retryable=retryable)
