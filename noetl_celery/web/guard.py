"""The door of `serve`: who may send a request that changes something, from where, and
how big. One ASGI middleware around the whole app (outside the auth gate), with its
decisions as pure functions of the request's method, path and headers.

A browser tab on any site can send POSTs to a server on 127.0.0.1 (a form, a no-cors
fetch) and the browser adds whatever credentials it holds for it; a DNS-rebinding page
can even read the answers. So, for every request:

1. **Host allow-list**: the `Host` header must name this server. Without credentials
   configured (`serve` then binds loopback only) that is a loopback name (`localhost`,
   `127.x.x.x`, `[::1]`, any port); `NOETL_API_ALLOWED_HOSTS` adds a deployment's names
   (`*.example.com` matches its subdomains). A rebinding page's `Host` is its own name:
   400, before anything is read.
2. **Cross-site refusal** for POST, PUT, PATCH and DELETE: 403 when the browser says
   the request came from another site (`Sec-Fetch-Site: cross-site | same-site`) or
   sends an `Origin` that is neither this server nor one of `NOETL_API_CORS_ORIGINS`.
   Clients that are not browsers (curl, NoETL's CLI, the Python client) send neither
   header and pass.
3. **Content types**: a state-changing request with a body must say what it sends, and
   only what its route reads: JSON (`application/json`) on the API, also YAML
   (`application/yaml`, `application/x-yaml`, `text/yaml`) where a playbook is
   registered, url-encoded forms on the pages. 415 otherwise: the content types a page
   may send cross-site without asking (`text/plain`, forms, multipart) are not JSON, so
   no body a browser can send without a preflight is ever read as one.
4. **Size**: a body larger than the limit is refused (413) from its `Content-Length`
   before any of it is read, or as soon as the bytes streamed passed the limit, so a
   200 MB upload costs no memory.
5. **Headers on every answer**: no framing (`X-Frame-Options: DENY`, CSP
   `frame-ancestors 'none'`), a strict content policy (scripts and styles from this
   server only), `nosniff`, no cross-origin embedding of the answers
   (`Cross-Origin-Resource-Policy: same-origin`), referrers kept on this site.

Refusals are one line: `{"detail": ...}` on the API, a small HTML page elsewhere.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.exceptions import HTTPException

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON = "application/json"
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml"})
FORM = "application/x-www-form-urlencoded"
# the routes that register a playbook take its YAML as the body, as well as JSON
YAML_PATHS = frozenset({"/api/v1/catalog", "/api/catalog/register"})

# Every answer's content policy: scripts, styles and fetches from this server only, no
# plugins, no <base> rewriting, forms post here, and nobody frames the page.
CONTENT_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str


@dataclass(frozen=True)
class GuardPolicy:
    """What the door lets in. `allowed_hosts`: names (`api.example.com`, `*.example.com`)
    accepted in `Host` besides loopback ones; `any_host`: no Host check at all (a server
    with credentials and no list: a rebinding page has no credentials to send).
    `trusted_origins`: the CORS origins, allowed to send state-changing requests."""

    allowed_hosts: tuple[str, ...] = ()
    any_host: bool = False
    trusted_origins: frozenset[str] = frozenset()
    max_body_bytes: int = 32 * 1024 * 1024

    @classmethod
    def build(
        cls,
        *,
        credentials: bool,
        allowed_hosts: Iterable[str],
        cors_origins: Iterable[str],
        max_body_bytes: int,
    ) -> GuardPolicy:
        hosts = tuple(h.strip().lower() for h in allowed_hosts if h.strip())
        return cls(
            allowed_hosts=hosts,
            any_host=credentials and not hosts,
            trusted_origins=frozenset(o.rstrip("/").lower() for o in cors_origins),
            max_body_bytes=max_body_bytes,
        )


# ---- the decisions (pure) ----------------------------------------------------------------
def host_name(host: str) -> str:
    """The name of a `Host` value, without its port: `[::1]:8082` -> `::1`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host[1:]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def is_loopback_name(name: str) -> bool:
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_allowed(host: str | None, policy: GuardPolicy) -> bool:
    if policy.any_host:
        return True
    name = host_name(host or "")
    if not name:
        return False
    if is_loopback_name(name):
        return True
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in policy.allowed_hosts)


def _origin(value: str) -> str:
    """`scheme://host[:port]` of an Origin (or Referer) value, lower case."""
    parts = urlsplit(value.strip())
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}".lower()


def _authority(origin: str) -> str:
    """`host[:port]` of an origin, its scheme's default port left out."""
    scheme, _, netloc = origin.partition("://")
    default = {"http": ":80", "https": ":443"}.get(scheme)
    return netloc[: -len(default)] if default and netloc.endswith(default) else netloc


def cross_site(headers: Mapping[str, str], host: str, policy: GuardPolicy) -> bool:
    """Whether a state-changing request came from a page of another site (module
    docstring, 2). `headers` keys are lower case; `host` is the Host header. The
    Origin's scheme is not compared: behind a proxy that ends TLS the server sees http
    while the page is https, and one host and port cannot serve two schemes."""
    origin = headers.get("origin")
    if origin is not None:
        if origin == "null":  # sandboxed frames, data: URLs, some redirects
            return True
        given = _origin(origin)
        if given in policy.trusted_origins:
            return False
        own = host.strip().lower()
        return _authority(given) not in (
            own,
            _authority(f"http://{own}"),
            _authority(f"https://{own}"),
        )
    return headers.get("sec-fetch-site", "") in ("cross-site", "same-site")


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def accepted_types(path: str) -> frozenset[str]:
    """The content types a state-changing request to `path` may send."""
    if path in YAML_PATHS:
        return frozenset({JSON, *YAML_TYPES})
    if is_api(path):
        return frozenset({JSON})
    return frozenset({FORM})


def is_api(path: str) -> bool:
    """API paths answer JSON; the others are pages (HTML)."""
    return path == "/api" or path.startswith(("/api/", "/metrics", "/openapi.json"))


def _has_body(headers: Mapping[str, str]) -> bool:
    length = headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "transfer-encoding" in headers


def refusal(
    method: str, path: str, headers: Mapping[str, str], policy: GuardPolicy
) -> Refusal | None:
    """Why the request may not pass, or None. `headers` keys are lower case."""
    host = headers.get("host", "")
    if not host_allowed(host, policy):
        return Refusal(
            400,
            f"unknown Host {host_name(host)[:100]!r}: this server answers to "
            "its loopback names and NOETL_API_ALLOWED_HOSTS",
        )
    length = headers.get("content-length")
    if length is not None:
        if not length.strip().isdigit():
            return Refusal(400, "Content-Length is not a number")
        if int(length) > policy.max_body_bytes:
            return Refusal(413, body_too_large(policy.max_body_bytes))
    if method not in UNSAFE_METHODS:
        return None
    if cross_site(headers, host, policy):
        return Refusal(
            403,
            "cross-site request refused: send it from this server's own "
            "pages, or from a client that is not a browser",
        )
    content_type = headers.get("content-type")
    if content_type is None and not _has_body(headers):
        return None  # a body-less action (cancel, pause): the cross-site check was enough
    accepted = accepted_types(path)
    given = media_type(content_type or "")
    if given not in accepted:
        return Refusal(
            415, f"send Content-Type {' or '.join(sorted(accepted))}, not {given[:100] or 'none'}"
        )
    return None


def body_too_large(limit: int) -> str:
    return f"request body larger than {limit} bytes"


# ---- the middleware -------------------------------------------------------------------------
class BodyTooLarge(HTTPException):
    """Raised while a body is read, once it passed the limit: an HTTPException, so
    FastAPI's body parsing lets it through and the app answers `{"detail": ...}` 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, body_too_large(limit))


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def with_security_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` plus the security headers it does not set itself (a page that needs a
    looser content policy, such as the API docs, sets its own)."""
    present = {name.lower() for name, _ in headers}
    added = [(n, v) for n, v in SECURITY_HEADERS if n not in present]
    if b"content-security-policy" not in present:
        added.append((b"content-security-policy", CONTENT_POLICY.encode()))
    return [*headers, *added]


class RequestGuard:
    """ASGI middleware: `refusal` first, then the security headers on every answer."""

    def __init__(
        self,
        app: ASGIApp,
        policy: GuardPolicy,
        html_error: Callable[[int, str], str],
    ) -> None:
        self.app = app
        self.policy = policy
        self.html_error = html_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        refused = refusal(scope.get("method", "GET"), path, _headers(scope), self.policy)
        if refused is not None:
            await self._answer(send, path, refused)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": with_security_headers(list(message["headers"]))}
            await send(message)

        await self.app(scope, self._limited(receive), send_secured)

    def _limited(self, receive: Receive) -> Receive:
        """`receive`, raising `BodyTooLarge` as soon as more than the limit arrived (a
        body streamed without Content-Length, or longer than it said): the app answers
        413 from there, and the rest is never read."""
        seen = 0
        limit = self.policy.max_body_bytes

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        return limited

    async def _answer(self, send: Send, path: str, refused: Refusal) -> None:
        if is_api(path):
            import json

            body = json.dumps({"detail": refused.message}).encode()
            kind = b"application/json"
        else:
            body = self.html_error(refused.status, refused.message).encode()
            kind = b"text/html; charset=utf-8"
        headers = [
            (b"content-type", kind),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
            # the rest of the body is never read: the connection cannot be reused
            (b"connection", b"close"),
        ]
        await send(
            {
                "type": "http.response.start",
                "status": refused.status,
                "headers": with_security_headers(headers),
            }
        )
        await send({"type": "http.response.body", "body": body})
