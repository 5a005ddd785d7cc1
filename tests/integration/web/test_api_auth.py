"""Who may call a real `noetl-celery serve`: a bearer token (also as NoETL's
`X-Session-Token`), basic credentials, CORS for the configured origins only, and a
public bind allowed once authentication is on."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from tests.support.server import serving

pytestmark = pytest.mark.integration

TOKEN = "tok-4f1c9a-api-test"
ORIGIN = "http://example.test"
LISTING = "/api/v1/executions?limit=1"


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_token_cors_and_a_public_bind(distributed: dict[str, Any]) -> None:
    env = {**distributed["env"], "NOETL_API_TOKEN": TOKEN, "NOETL_API_CORS_ORIGINS": ORIGIN}
    # bound to every interface: allowed because a token is required
    with serving(env, extra=["--host", "0.0.0.0"]) as server:
        url = server.url + LISTING
        assert httpx.get(server.url + "/api/health").json() == {"status": "ok"}
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": TOKEN},  # no scheme
            {"X-Session-Token": "wrong"},
            basic("admin", TOKEN),  # basic is not configured here
        ):
            refused = httpx.get(url, headers=headers)
            assert refused.status_code == 401, headers
            assert refused.headers["www-authenticate"] == 'Bearer realm="noetl-celery"'
            assert refused.json() == {
                "detail": "authentication required: send the API token or basic credentials"
            }
        for headers in ({"Authorization": f"Bearer {TOKEN}"}, {"X-Session-Token": TOKEN}):
            assert httpx.get(url, headers=headers).status_code == 200, headers
        assert httpx.post(server.url + "/api/v1/executions", json={}).status_code == 401

        preflight = httpx.options(
            url,
            headers={
                "Origin": ORIGIN,
                "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Headers": "authorization",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == ORIGIN
        allowed = httpx.get(url, headers={"Origin": ORIGIN, "Authorization": f"Bearer {TOKEN}"})
        assert allowed.headers["access-control-allow-origin"] == ORIGIN
        other = httpx.get(
            url, headers={"Origin": "http://elsewhere.test", "Authorization": f"Bearer {TOKEN}"}
        )
        assert other.status_code == 200 and "access-control-allow-origin" not in other.headers
        refused_preflight = httpx.options(
            url,
            headers={"Origin": "http://elsewhere.test", "Access-Control-Request-Method": "GET"},
        )
        assert "access-control-allow-origin" not in refused_preflight.headers
        # a browser on the allowed origin is told "unauthorised", not a CORS failure
        unauthorised = httpx.get(url, headers={"Origin": ORIGIN})
        assert unauthorised.status_code == 401
        assert unauthorised.headers["access-control-allow-origin"] == ORIGIN
    assert server.proc.returncode is not None


def test_basic_credentials(distributed: dict[str, Any]) -> None:
    env = {**distributed["env"], "NOETL_API_BASIC_AUTH": "admin:s3cret-basic"}
    with serving(env) as server:
        url = server.url + LISTING
        for headers in (
            {},
            basic("admin", "wrong"),
            basic("other", "s3cret-basic"),
            {"Authorization": "Basic !!!not-base64"},
            {"Authorization": "Bearer s3cret-basic"},
            {"X-Session-Token": "s3cret-basic"},
        ):
            refused = httpx.get(url, headers=headers)
            assert refused.status_code == 401, headers
            assert refused.headers["www-authenticate"] == 'Basic realm="noetl-celery"'
        assert httpx.get(url, headers=basic("admin", "s3cret-basic")).status_code == 200
        assert httpx.get(url, auth=("admin", "s3cret-basic")).status_code == 200
        assert httpx.get(server.url + "/api/health").status_code == 200
        # CORS is off unless origins are configured
        plain = httpx.get(url, headers={"Origin": ORIGIN, **basic("admin", "s3cret-basic")})
        assert "access-control-allow-origin" not in plain.headers
