"""Fixtures for the tools integration tests: a real Postgres and a real HTTP server.

Postgres must be reachable (default `postgresql://postgres@127.0.0.1:5432/postgres`, override
with NOETL_TEST_PG_ADMIN_DSN): when it is not, the tests fail with a clear message instead of
being skipped, so a broken environment cannot pass for a green run.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noetl_celery.settings import Settings
from noetl_celery.tools.base import ToolCall, ToolOutcome
from noetl_celery.tools.credentials import CredentialStore
from noetl_celery.tools.registry import get_tool
from noetl_celery.tools.services import ToolServices

ADMIN_DSN = os.environ.get(
    "NOETL_TEST_PG_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
TEST_DB = "noetl_tools_test"
# Distinctive, so that a leak is found by a plain substring search.
CLOSED_PORT_PASSWORD = "Zq9-Distinctive-Pw-41x"


def free_port() -> int:
    """A port nothing listens on (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def pg_test_dsn() -> str:
    """DSN of the scratch database, created when missing."""
    try:
        admin = psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"tools integration tests need Postgres at {ADMIN_DSN} (set NOETL_TEST_PG_ADMIN_DSN "
            f"to point elsewhere); connecting failed: {exc}",
            pytrace=False,
        )
    with admin:
        exists = admin.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (TEST_DB,)
        ).fetchone()
        if not exists:
            # a parallel run may create it first
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                admin.execute(f'CREATE DATABASE "{TEST_DB}"')
    params = conninfo_to_dict(ADMIN_DSN)
    params["dbname"] = TEST_DB
    return make_conninfo("", **{k: str(v) for k, v in params.items()})


@pytest.fixture(scope="session")
def tools_credentials_file(pg_test_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    info = conninfo_to_dict(pg_test_dsn)
    lines = [
        "pg_test:",  # NoETL's payload shape, port as a string
        f"  db_host: '{info.get('host', '127.0.0.1')}'",
        f"  db_port: '{info.get('port', '5432')}'",
        f"  db_user: '{info.get('user', 'postgres')}'",
        f"  db_password: '{info.get('password', '')}'",
        f"  db_name: '{TEST_DB}'",
        "pg_record:",  # NoETL's credential-record shape
        "  type: postgres",
        "  data:",
        f"    dsn: '{pg_test_dsn}'",
        "pg_closed:",  # nothing listens there; its password must never leak
        "  db_host: 127.0.0.1",
        f"  db_port: {free_port()}",
        "  db_user: ghost",
        f"  db_password: '{CLOSED_PORT_PASSWORD}'",
        "  db_name: nowhere",
    ]
    path = tmp_path_factory.mktemp("creds") / "credentials.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def make_services(credentials: Path, tmp_path: Path, **overrides: Any) -> ToolServices:
    settings = Settings(home=tmp_path, credentials_file=str(credentials))
    return ToolServices(
        settings.with_overrides(**overrides), CredentialStore.from_file(credentials)
    )


@pytest.fixture(scope="session")
def pg_services(
    tools_credentials_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ToolServices]:
    svc = make_services(tools_credentials_file, tmp_path_factory.mktemp("home"))
    yield svc
    svc.close()


RunTool = Callable[..., ToolOutcome]


def run_with(
    svc: ToolServices,
    kind: str,
    config: Mapping[str, Any],
    *,
    input: Mapping[str, Any] | None = None,
    execution_id: str = "exec-int",
    step: str = "step_int",
) -> ToolOutcome:
    call = ToolCall(
        kind=kind,
        config=dict(config),
        input=dict(input or {}),
        execution_id=execution_id,
        step=step,
        command_id="cmd",
        services=svc,
    )
    return get_tool(kind).run(call)


@pytest.fixture
def run_pg(pg_services: ToolServices) -> RunTool:
    def run(config: Mapping[str, Any], **kwargs: Any) -> ToolOutcome:
        return run_with(pg_services, "postgres", {"auth": "pg_test", **config}, **kwargs)

    return run


@pytest.fixture
def http_services(tmp_path: Path) -> Iterator[ToolServices]:
    svc = ToolServices(
        Settings(home=tmp_path, http_timeout_seconds=10.0),
        CredentialStore({"api": {"api_token": "Api-Token-Secret-77"}}),
    )
    yield svc
    svc.close()


@pytest.fixture
def run_http(http_services: ToolServices) -> RunTool:
    def run(config: Mapping[str, Any], **kwargs: Any) -> ToolOutcome:
        return run_with(http_services, "http", config, **kwargs)

    return run


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real APIs do
    disable_nagle_algorithm = True  # otherwise each keep-alive response stalls ~40 ms

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(
        self, code: int, body: bytes, content_type: str, headers: Mapping[str, str] | None = None
    ) -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout tests)

    def _json(self, code: int, value: Any, headers: Mapping[str, str] | None = None) -> None:
        self._send(code, json.dumps(value).encode(), "application/json", headers)

    def _route(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] if len(v) == 1 else v for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        if not self._fixed(url.path) and not self._computed(url.path, query, body):
            self._json(404, {"error": "unknown path"})

    def _fixed(self, path: str) -> bool:
        """Paths whose response never changes; False for any other path."""
        if path == "/json":
            self._json(200, {"ok": True, "items": [1, 2, 3]})
        elif path == "/text":
            self._send(200, b"hello there", "text/plain; charset=utf-8")
        elif path == "/jsontext":
            self._send(200, b'{"looks": "like json"}', "text/plain")
        elif path == "/missing":
            self._json(404, {"error": "no such thing"})
        elif path == "/boom":
            self._send(500, b"internal kaboom", "text/plain")
        elif path == "/redirect":
            self._send(302, b"", "text/plain", {"Location": "/json"})
        elif path == "/empty":
            self._send(204, b"", "text/plain")
        elif path == "/login":  # an API's session cookie
            self._json(200, {"ok": True}, {"Set-Cookie": "session=of-execution-a; Path=/"})
        else:
            return False
        return True

    def _computed(self, path: str, query: Mapping[str, Any], body: str) -> bool:
        """Paths whose response depends on the request; False for any other path."""
        if path == "/limited":
            when = query.get("date")
            retry = email.utils.formatdate(time.time() + 30, usegmt=True) if when else "7"
            self._json(429, {"error": "slow down"}, {"Retry-After": retry})
        elif path.startswith("/status/"):
            self._json(int(path.rsplit("/", 1)[1]), {"status": "as asked"})
        elif path == "/slow":
            time.sleep(float(str(query.get("seconds", "1"))))
            self._json(200, {"slept": True})
        elif path == "/echo":
            self._echo(query, body)
        else:
            return False
        return True

    def _echo(self, query: Mapping[str, Any], body: str) -> None:
        parsed: Any = None
        form: Any = None
        ctype = self.headers.get("Content-Type", "")
        if "json" in ctype and body:
            parsed = json.loads(body)
        if "x-www-form-urlencoded" in ctype:
            form = {k: v[0] for k, v in parse_qs(body).items()}
        self._json(
            200,
            {
                "method": self.command,
                "query": query,
                "body": body,
                "json": parsed,
                "form": form,
                "content_type": ctype,
                "headers": {k.lower(): v for k, v in self.headers.items()},
            },
        )

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _route


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A local HTTP server on a free port, in a thread, for the block: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def http_base() -> Iterator[str]:
    with serving(_Handler) as base:
        yield base


@pytest.fixture
def closed_port_password() -> str:
    """The password of credential `pg_closed`, which points at a closed port."""
    return CLOSED_PORT_PASSWORD


@pytest.fixture
def new_pg_services(
    tools_credentials_file: Path, tmp_path: Path
) -> Iterator[Callable[..., ToolServices]]:
    """Factory of private ToolServices (own pools), closed after the test."""
    created: list[ToolServices] = []

    def factory(**overrides: Any) -> ToolServices:
        svc = make_services(tools_credentials_file, tmp_path, **overrides)
        created.append(svc)
        return svc

    yield factory
    for svc in created:
        svc.close()


@pytest.fixture
def run_tool_with() -> Callable[..., ToolOutcome]:
    """run_tool_with(services, kind, config, input=..., execution_id=..., step=...)."""
    return run_with
