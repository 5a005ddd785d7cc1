"""Who may call the HTTP server: a bearer token and/or HTTP basic credentials, from the
settings (`NOETL_API_TOKEN`, `NOETL_API_BASIC_AUTH=user:password`).

NoETL's CLI sends `--session-token T` as `Authorization: Bearer T` and `X-Session-Token: T`,
so the same token lets it in. Without any credentials configured the server is open, and
`serve` refuses to bind anything but loopback (cli.serve). `/api/health` stays open for
liveness probes: it says "ok" and nothing else; so does `/api/auth/validate`, NoETL's
GUI's token check, which says whether the token it was sent is the right one.
`/api/ready` is open for readiness probes (a kubelet sends no credentials): it says
"ok"/"embedded" or one line of what failed, URLs shown without their passwords.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from noetl_celery.errors import ConfigurationError
from noetl_celery.settings import Settings

# paths anyone may call (exact matches): liveness, readiness, and the GUI's token check
# (it answers whether the token sent is serve's, nothing else)
OPEN_PATHS = frozenset({"/api/health", "/api/ready", "/api/auth/validate"})
REALM = "noetl-celery"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


@dataclass(frozen=True)
class ApiAuth:
    token: str = ""
    basic: str = ""  # "user:password"

    @classmethod
    def from_settings(cls, settings: Settings) -> ApiAuth:
        if settings.api_basic_auth:
            user, sep, password = settings.api_basic_auth.partition(":")
            if not (user and sep and password):
                raise ConfigurationError(
                    "NOETL_API_BASIC_AUTH must be USER:PASSWORD, both non-empty"
                )
        return cls(token=settings.api_token, basic=settings.api_basic_auth)

    @property
    def configured(self) -> bool:
        return bool(self.token or self.basic)

    def allows(self, authorization: str | None, session_token: str | None = None) -> bool:
        """True when the request's credentials match (or none are configured)."""
        if not self.configured:
            return True
        if self.token and session_token and _same(session_token, self.token):
            return True
        scheme, _, value = (authorization or "").partition(" ")
        scheme, value = scheme.lower(), value.strip()
        if scheme == "bearer" and self.token:
            return _same(value, self.token)
        if scheme == "basic" and self.basic:
            try:
                decoded = base64.b64decode(value, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return False
            return _same(decoded, self.basic)
        return False

    def challenge(self) -> str:
        """The `WWW-Authenticate` value of a 401 (basic first: browsers then ask)."""
        return f'Basic realm="{REALM}"' if self.basic else f'Bearer realm="{REALM}"'


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class AuthGate:
    """ASGI middleware: a 401 with a challenge for requests `auth` does not allow."""

    def __init__(self, app: ASGIApp, auth: ApiAuth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not self.auth.configured
            or scope.get("method") == "OPTIONS"  # CORS preflights carry no credentials
            or scope.get("path") in OPEN_PATHS
        ):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.auth.allows(headers.get("authorization"), headers.get("x-session-token")):
            await self.app(scope, receive, send)
            return
        body = b'{"detail":"authentication required: send the API token or basic credentials"}'
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", self.auth.challenge().encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
