"""Fetching an http(s) `script:` on the worker, when the step runs (as NoETL does:
noetl/core/script/sources/http.py). A failure is the step's failure, with the error kind
an http tool would give for the same answer."""

from __future__ import annotations

from dataclasses import dataclass

from noetl_celery.models.outcome import ErrorKind
from noetl_celery.models.script_source import ScriptSource
from noetl_celery.tools.services import ToolServices


@dataclass(frozen=True)
class ScriptFetchError(Exception):
    kind: ErrorKind
    message: str
    retryable: bool = False

    def __str__(self) -> str:
        return self.message


def _status_kind(status: int) -> tuple[ErrorKind, bool]:
    if status == 404:
        return "not_found", False
    if status in (401, 403):
        return "auth", False
    if status == 429:
        return "rate_limit", True
    if status >= 500:
        return "server_error", True
    return "client_error", False


def fetch_script(source: ScriptSource, services: ToolServices, where: str) -> str:
    """The body of `source.url` as text; ScriptFetchError names the step and the URL."""
    import httpx  # lazy, as the http tool: most workers never fetch a script

    url = source.url
    if not url.lower().startswith(("http://", "https://")):
        raise ScriptFetchError(
            "config_error", f"{where}: http script source '{url}' is not an http(s) URL"
        )
    try:
        response = services.http_client().request(
            source.method,
            url,
            headers=source.headers,
            timeout=source.timeout,
            follow_redirects=True,  # script hosts (raw file servers) redirect often
        )
    except httpx.TimeoutException:
        raise ScriptFetchError(
            "timeout",
            f"{where}: cannot fetch script from {url}: no answer within {source.timeout:g}s",
            retryable=True,
        ) from None
    except httpx.HTTPError as exc:
        raise ScriptFetchError(
            "connection",
            f"{where}: cannot fetch script from {url}: {exc or type(exc).__name__}",
            retryable=True,
        ) from None
    if response.status_code >= 400:
        kind, retryable = _status_kind(response.status_code)
        raise ScriptFetchError(
            kind,
            f"{where}: cannot fetch script from {url}: HTTP {response.status_code}",
            retryable=retryable,
        )
    response.encoding = response.encoding or source.encoding
    return response.text
