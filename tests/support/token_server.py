"""A local OAuth2 token endpoint for keychain tests (127.0.0.1 only, stdlib).

- `POST /token` (or `/oauth2/token`; a form body): the client-credentials grant. Known clients
  (`CLIENT_ID`/`CLIENT_SECRET`) get `{access_token, token_type, expires_in}`; the token
  is `<prefix>-<n>`, `n` counting the tokens issued, so a test sees which one it got.
  A wrong secret is 401 `{"error": "invalid_client"}`, a grant other than
  `client_credentials` 400 `{"error": "unsupported_grant_type"}`. `?expires_in=S` sets
  the lifetime (default 3600), `?status=C` answers C with no token, `?plain=1` answers
  a text body.
- `GET /echo`: the request's headers as JSON (what a step sent as `Authorization`).
- `GET /api/whoami` (or `/v1/report`): 200 `{"who", "headers"}` for a bearer token this
  server issued that has not expired, else 401 (a run that used an expired token would
  fail here).

`requests` counts the token requests that were answered, by client id.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

CLIENT_ID = "kc-client"
CLIENT_SECRET = "kc-client-secret-5f1a9c"
TOKEN_PREFIX = "kc-oauth-token-0c7e2b"


@dataclass
class TokenServer:
    url: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: Counter[str] = field(default_factory=Counter)
    issued: list[str] = field(default_factory=list)
    expires: dict[str, float] = field(default_factory=dict)  # token -> monotonic deadline

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    def total(self) -> int:
        with self.lock:
            return sum(self.requests.values())

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()


class _Handler(BaseHTTPRequestHandler):
    """The token server's endpoints; `state` is set per server by `_handler`."""

    state: ClassVar[TokenServer]
    disable_nagle_algorithm = True

    def log_message(self, *_args: Any) -> None:  # quiet test output
        pass

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
        if not self._rejected(url.path, query, form):
            self._issue(query, form)

    def _rejected(self, path: str, query: Mapping[str, str], form: Mapping[str, str]) -> bool:
        """Answer a request the server refuses (as asked, or as a real one would)."""
        if path not in ("/token", "/oauth2/token"):
            self._send(404, {"error": "not_found"})
        elif "status" in query:
            self._send(int(query["status"]), {"error": "server_error"})
        elif query.get("plain"):
            self._send_text(200, "not json")
        elif form.get("grant_type") != "client_credentials":
            self._send(400, {"error": "unsupported_grant_type"})
        elif form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
            self._send(401, {"error": "invalid_client", "secret": form.get("client_secret")})
        else:
            return False
        return True

    def _issue(self, query: Mapping[str, str], form: Mapping[str, str]) -> None:
        client = form.get("client_id", "")
        with self.state.lock:
            self.state.requests[client] += 1
            token = f"{TOKEN_PREFIX}-{len(self.state.issued) + 1}"
            self.state.issued.append(token)
            lifetime = float(query.get("expires_in", 3600))
            self.state.expires[token] = time.monotonic() + lifetime
        body = {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": lifetime,
            "scope": form.get("scope", "read"),
        }
        self._send(200, body)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/echo":
            self._send(200, {"headers": {k.lower(): v for k, v in self.headers.items()}})
            return
        if path in ("/api/whoami", "/v1/report"):
            auth = self.headers.get("Authorization") or ""
            token = auth.removeprefix("Bearer ")
            with self.state.lock:
                known = self.state.expires.get(token, 0.0) > time.monotonic()
            if known:
                headers = {k.lower(): v for k, v in self.headers.items()}
                self._send(200, {"who": CLIENT_ID, "headers": headers})
            else:
                self._send(401, {"error": "invalid_token"})
            return
        self._send(404, {"error": "not_found"})

    def _send(self, status: int, body: Any) -> None:
        self._send_text(status, json.dumps(body), "application/json")

    def _send_text(self, status: int, text: str, kind: str = "text/plain") -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _handler(server: TokenServer) -> type[BaseHTTPRequestHandler]:
    return type("Handler", (_Handler,), {"state": server})


@contextmanager
def token_server() -> Iterator[TokenServer]:
    """A running token server on a free loopback port."""
    state = TokenServer(url="")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True, name="token-server")
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
