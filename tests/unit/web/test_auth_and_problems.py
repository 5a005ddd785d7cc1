"""The pure parts of the HTTP layer: who `ApiAuth` lets in, its challenge, loopback
addresses, and FastAPI's request problems as one line."""

from __future__ import annotations

import base64

import pytest

from noetl_celery.errors import BrokerUnavailable, ConfigurationError
from noetl_celery.settings import Settings
from noetl_celery.web.auth import ApiAuth, is_loopback
from noetl_celery.web.problems import body_for, status_for, validation_line

TOKEN = "t0ken-abc"
BASIC = "admin:pa:ss"  # a password may hold a colon


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


NOT_UTF8 = base64.b64encode(bytes([0xFF, 0xFE])).decode()
BOTH = ApiAuth(token=TOKEN, basic=BASIC)
TOKEN_ONLY = ApiAuth(token=TOKEN)
BASIC_ONLY = ApiAuth(basic=BASIC)


@pytest.mark.parametrize(
    ("auth", "authorization", "session", "allowed"),
    [
        (ApiAuth(), None, None, True),  # nothing configured: open
        (TOKEN_ONLY, None, None, False),
        (TOKEN_ONLY, f"Bearer {TOKEN}", None, True),
        (TOKEN_ONLY, f"bearer {TOKEN}", None, True),  # the scheme is case-insensitive
        (TOKEN_ONLY, f"Bearer  {TOKEN} ", None, True),
        (TOKEN_ONLY, "Bearer wrong", None, False),
        (TOKEN_ONLY, f"Bearer {TOKEN}x", None, False),
        (TOKEN_ONLY, TOKEN, None, False),  # no scheme
        (TOKEN_ONLY, f"Token {TOKEN}", None, False),  # another scheme
        (TOKEN_ONLY, f"Basic {b64(BASIC)}", None, False),  # basic not configured
        (TOKEN_ONLY, None, TOKEN, True),  # NoETL's X-Session-Token
        (TOKEN_ONLY, None, "wrong", False),
        (TOKEN_ONLY, "Bearer wrong", TOKEN, True),
        (BASIC_ONLY, f"Basic {b64(BASIC)}", None, True),
        (BASIC_ONLY, f"Basic {b64('admin:wrong')}", None, False),
        (BASIC_ONLY, f"Basic {b64('other:pa:ss')}", None, False),
        (BASIC_ONLY, "Basic !!!not-base64", None, False),
        (BASIC_ONLY, "Basic " + NOT_UTF8, None, False),
        (BASIC_ONLY, "Basic ", None, False),
        (BASIC_ONLY, f"Bearer {BASIC}", None, False),  # bearer not configured
        (BASIC_ONLY, None, "pa:ss", False),  # a session token is not a password
        (BOTH, f"Bearer {TOKEN}", None, True),
        (BOTH, f"Basic {b64(BASIC)}", None, True),
        (BOTH, None, TOKEN, True),
        (BOTH, None, None, False),
    ],
)
def test_allows(
    auth: ApiAuth, authorization: str | None, session: str | None, allowed: bool
) -> None:
    assert auth.allows(authorization, session) is allowed


def test_challenge_and_settings() -> None:
    assert TOKEN_ONLY.challenge() == 'Bearer realm="noetl-celery"'
    assert BASIC_ONLY.challenge() == 'Basic realm="noetl-celery"'
    assert BOTH.challenge() == 'Basic realm="noetl-celery"'  # browsers then ask
    assert not ApiAuth().configured and BOTH.configured
    auth = ApiAuth.from_settings(Settings(api_token=TOKEN, api_basic_auth=BASIC))
    assert auth == BOTH
    for bad in ("admin", "admin:", ":pw"):
        with pytest.raises(ConfigurationError, match="USER:PASSWORD"):
            ApiAuth.from_settings(Settings(api_basic_auth=bad))


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.4", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("errors", "line"),
    [
        ([], "invalid request"),
        (
            [{"loc": ("query", "limit"), "msg": "Input should be less than or equal to 500"}],
            "query parameter 'limit': Input should be less than or equal to 500",
        ),
        (
            [
                {"loc": ("body", "payload"), "msg": "Input should be a valid dictionary"},
                {"loc": ("body", "surprise"), "msg": "Extra inputs are not permitted"},
            ],
            "body field 'payload': Input should be a valid dictionary (and 1 more)",
        ),
        (
            [{"loc": ("body",), "msg": "Value error, give either `path` or `playbook`"}],
            "body: give either `path` or `playbook`",
        ),
        (
            [{"loc": ("path", "schedule_id"), "msg": "Input should be a valid integer"}],
            "path parameter 'schedule_id': Input should be a valid integer",
        ),
    ],
)
def test_validation_line(errors: list[dict[str, object]], line: str) -> None:
    assert validation_line(errors) == line


def test_a_start_held_for_the_broker_is_accepted_and_one_without_an_execution_is_503() -> None:
    held = BrokerUnavailable("broker redis://h:6379/0 unreachable; the execution 7 ...", "7")
    assert status_for(held) == 202
    assert body_for(held) == {
        "execution_id": "7",
        "status": "accepted",
        "detail": "broker redis://h:6379/0 unreachable; the execution 7 ...",
    }
    nothing = BrokerUnavailable("broker redis://h:6379/0 unreachable; nothing was started")
    assert status_for(nothing) == 503
    assert body_for(nothing) == {"detail": str(nothing)}
