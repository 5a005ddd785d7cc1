"""Turning an http tool config into request arguments (no I/O, no httpx import)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_NO_VALUE = object()


class RequestConfigError(ValueError):
    """The http tool config cannot produce a request."""


@dataclass
class RequestSpec:
    method: str
    url: str
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    # exactly one of these is set for a request with a body
    json_body: Any = _NO_VALUE
    form: Mapping[str, Any] | None = None
    content: str | bytes | None = None

    @property
    def has_json(self) -> bool:
        return self.json_body is not _NO_VALUE


def as_bool(value: Any, default: bool) -> bool:
    """Rendered templates give strings: accept "false", "0", "no" as False."""
    if value is None or value == "":
        return default
    if isinstance(value, str):
        return value.strip().lower() not in {"false", "0", "no", "off"}
    return bool(value)


def _param_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"  # not Python's "True", which APIs reject
    if isinstance(value, list | tuple):
        return [_param_value(v) for v in value if v is not None]
    if isinstance(value, Mapping):
        return json.dumps(value, default=str)
    return value if isinstance(value, str | int | float) else str(value)


def clean_params(params: Any) -> dict[str, Any]:
    """Query parameters without None values and with JSON-style booleans."""
    if not isinstance(params, Mapping):
        return {}
    return {str(k): _param_value(v) for k, v in params.items() if v is not None}


def _header_value(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return ""


def build_request(config: Mapping[str, Any]) -> RequestSpec:
    """The request a config describes; RequestConfigError for a missing URL."""
    url = config.get("url") or config.get("endpoint")
    if not url or not isinstance(url, str):
        raise RequestConfigError("http tool needs `url` (or `endpoint`)")
    method = str(config.get("method") or "GET").strip().upper()
    raw_headers = config.get("headers")
    headers = (
        {str(k): str(v) for k, v in raw_headers.items() if v is not None}
        if isinstance(raw_headers, Mapping)
        else {}
    )
    spec = RequestSpec(method=method, url=url.strip(), headers=headers)
    # `params` always go to the query string. NoETL drops them for POST/PUT/PATCH, which
    # silently loses e.g. an API key in the query of a POST: a trap we do not copy.
    spec.params.update(clean_params(config.get("params")))
    data = config.get("data")
    unified = isinstance(data, Mapping) and ("query" in data or "body" in data)
    if method in BODY_METHODS:
        if isinstance(data, Mapping) and "body" in data:
            spec.params.update(clean_params(data.get("query")))
            body = data.get("body")
        elif data is not None:
            body = data  # e.g. a GraphQL {query, variables} document is a body, not a query
        else:
            body = _first_present(config, ("payload", "body", "json"))
        _set_body(spec, body)
    elif isinstance(data, Mapping):
        spec.params.update(clean_params(data.get("query") if unified else data))
    return spec


def _first_present(config: Mapping[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return None


def _set_body(spec: RequestSpec, body: Any) -> None:
    if body is None:
        return
    content_type = _header_value(spec.headers, "content-type").lower()
    if isinstance(body, str | bytes):
        spec.content = body  # already serialised by the playbook: send as is
    elif "application/x-www-form-urlencoded" in content_type and isinstance(body, Mapping):
        spec.form = clean_params(body)
    else:
        spec.json_body = body
