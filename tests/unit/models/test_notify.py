"""models.notify and settings_notify: the `metadata.notify` block, `on`, the backoff,
the signature and the one-line summary."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from noetl_celery.errors import ConfigurationError
from noetl_celery.models.notify import (
    DEFAULT_ON,
    backoff_seconds,
    notification_id,
    on_of,
    parse_playbook_notify,
    sign,
    summary_text,
)
from noetl_celery.settings import Settings
from noetl_celery.settings_notify import notify_settings, parse_on


def test_a_url_target_with_its_on_and_secret() -> None:
    declared = parse_playbook_notify(
        {"url": "https://hooks.example/x", "on": ["failed", "completed"], "secret": "s"}
    )
    assert declared is not None
    assert declared.on == {"failed", "completed"}
    assert (declared.url, declared.secret, declared.credential) == (
        "https://hooks.example/x",
        "s",
        None,
    )
    assert "hooks.example" not in repr(declared) and "'s'" not in repr(declared)


def test_a_credential_target_and_the_default_on() -> None:
    declared = parse_playbook_notify({"credential": "ops_hook"})
    assert declared is not None
    assert declared.credential == "ops_hook" and declared.on == DEFAULT_ON


def test_yaml_reads_a_bare_on_key_as_true_and_it_still_counts() -> None:
    declared = parse_playbook_notify({"url": "http://h/x", True: ["deadline"]})
    assert declared is not None and declared.on == {"deadline"}


def test_absent_is_none() -> None:
    assert parse_playbook_notify(None) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("http://x", "must be a mapping"),
        ({"on": ["failed"]}, "exactly one of `url` or `credential`"),
        ({"url": "http://x", "credential": "c"}, "exactly one of `url` or `credential`"),
        ({"url": "ftp://x"}, "metadata.notify.url must be an http:// or https:// URL"),
        ({"url": "http://x", "on": ["failed", "boom"]}, "'boom' is not one of"),
        ({"url": "http://x", "on": []}, "metadata.notify.on is empty"),
        ({"url": "http://x", "on": 3}, "must be a list of"),
        ({"url": "http://x", "token": "t"}, "unknown keys ['token']"),
        ({"credential": "c", "secret": "s"}, "metadata.notify.secret must be a string"),
        ({"credential": " "}, "must be a credential alias"),
    ],
)
def test_bad_blocks_are_refused_in_one_line(value: object, message: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        parse_playbook_notify(value)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_on_accepts_a_comma_list_and_refuses_unknown_words() -> None:
    assert parse_on("failed, completed", "X") == {"failed", "completed"}
    with pytest.raises(ConfigurationError, match="X: 'fialed' is not one of"):
        parse_on("fialed", "X")


def test_the_engine_settings() -> None:
    assert Settings().notify.url == "" and Settings().notify.on == DEFAULT_ON
    got = notify_settings(
        {
            "NOETL_NOTIFY_URL": "https://hooks.example/T/B/secretpath",
            "NOETL_NOTIFY_SECRET": "k",
            "NOETL_NOTIFY_ON": "completed,failed",
            "NOETL_NOTIFY_BACKOFF_SECONDS": "0.5",
            "NOETL_PUBLIC_URL": "http://noetl:8000/",
        }
    )
    assert got.on == {"completed", "failed"}
    assert got.backoff_seconds == 0.5 and got.public_url == "http://noetl:8000"
    assert "secretpath" not in repr(got) and "'k'" not in repr(got)
    assert Settings.from_env({"NOETL_NOTIFY_ON": "failed"}).notify.on == {"failed"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NOETL_NOTIFY_ON": "failed,oops"}, "NOETL_NOTIFY_ON: 'oops' is not one of"),
        ({"NOETL_NOTIFY_URL": "hooks.example/x"}, "NOETL_NOTIFY_URL must be an http://"),
        ({"NOETL_NOTIFY_BACKOFF_SECONDS": "0"}, "NOETL_NOTIFY_BACKOFF_SECONDS must be a positive"),
        ({"NOETL_NOTIFY_BACKOFF_MAX_SECONDS": "x"}, "NOETL_NOTIFY_BACKOFF_MAX_SECONDS must be"),
    ],
)
def test_bad_settings_fail_at_start_in_one_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        Settings.from_env(env)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("attempts", "wait"),
    [(0, 0.0), (1, 5.0), (2, 10.0), (3, 20.0), (7, 320.0), (8, 600.0), (50, 600.0)],
)
def test_the_backoff_doubles_and_is_capped(attempts: int, wait: float) -> None:
    assert backoff_seconds(attempts, 5.0, 600.0) == wait


def test_the_signature_is_hmac_sha256_of_the_raw_body() -> None:
    body = b'{"id": "e1.failed.engine"}'
    expected = hmac.new(b"k", body, hashlib.sha256).hexdigest()
    assert sign(body, "k") == f"sha256={expected}"
    assert sign(body, "other") != sign(body, "k")


def test_ids_and_on_of_events() -> None:
    assert notification_id("e1", "failed", "engine") == "e1.failed.engine"
    assert on_of("deadline.missed") == on_of("deadline.at_risk") == "deadline"
    assert on_of("cancelled") == "cancelled"


@pytest.mark.parametrize(
    ("event", "seconds", "error", "text"),
    [
        ("failed", 192, "disk full", "noetl: p FAILED after 3m12s: disk full"),
        ("completed", 4.4, None, "noetl: p COMPLETED after 4s"),
        ("cancelled", 3900, "by hand", "noetl: p CANCELLED after 1h05m: by hand"),
        ("deadline.missed", 60, None, "noetl: p MISSED its deadline running for 1m00s"),
        ("failed", 1, "a\n  b", "noetl: p FAILED after 1s: a b"),
    ],
)
def test_the_summary_line(event: str, seconds: float, error: str | None, text: str) -> None:
    assert summary_text("p", event, seconds, error) == text


def test_a_long_error_is_cut_in_the_summary() -> None:
    line = summary_text("p", "failed", 1, "x" * 1000)
    assert len(line) < 400 and line.endswith("…")
