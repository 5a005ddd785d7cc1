"""Notifications (issue 32): who is told when an execution ends or misses its deadline,
and what they receive. Pure: parsing, the payload's summary line, the signature, the
retry backoff. Delivery is engine.notify; the outbox rows are store.notifications.

Targets: the engine-wide one (NOETL_NOTIFY_URL, NOETL_NOTIFY_SECRET, NOETL_NOTIFY_ON)
and a playbook's own `metadata.notify`:

    metadata:
      notify: {url: https://hooks.example/x, on: [failed, deadline], secret: s3cret}
      # or the url and secret from the credentials file (fields `url`, `secret`):
      notify: {credential: ops_hook, on: [failed]}
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noetl_celery.errors import ConfigurationError
from noetl_celery.settings_notify import (
    DEFAULT_ON,
    ON_CANCELLED,
    ON_CHOICES,
    ON_COMPLETED,
    ON_DEADLINE,
    ON_FAILED,
    parse_on,
)

__all__ = [
    "DEFAULT_ON",
    "ON_CANCELLED",
    "ON_CHOICES",
    "ON_COMPLETED",
    "ON_DEADLINE",
    "ON_FAILED",
    "PlaybookNotify",
    "parse_on",
    "parse_playbook_notify",
]

# a notification's event: an execution's terminal status, or a deadline event
EVENT_AT_RISK = "deadline.at_risk"
EVENT_MISSED = "deadline.missed"
DEADLINE_EVENTS = (EVENT_AT_RISK, EVENT_MISSED)

TARGET_ENGINE = "engine"  # NOETL_NOTIFY_URL
TARGET_PLAYBOOK = "playbook"  # metadata.notify

SIGNATURE_HEADER = "X-Noetl-Signature"
ID_HEADER = "X-Noetl-Notification-Id"
ERRORS_LISTED = 5  # item errors a payload carries


def on_of(event: str) -> str:
    """The `on` choice an event is delivered for: `deadline.*` -> deadline."""
    return ON_DEADLINE if event in DEADLINE_EVENTS else event


@dataclass(frozen=True)
class PlaybookNotify:
    """`metadata.notify` as declared: a url (and secret) written in the playbook, or the
    alias of a credential holding them. `repr` hides both."""

    on: frozenset[str]
    url: str | None = None
    secret: str | None = None
    credential: str | None = None

    def __repr__(self) -> str:
        target = f"credential={self.credential!r}" if self.credential else "url=***"
        return f"PlaybookNotify({target}, on={sorted(self.on)})"


_NOTIFY_KEYS = {"url", "on", "secret", "credential"}


def parse_playbook_notify(value: Any) -> PlaybookNotify | None:
    """`metadata.notify`; None when absent; ConfigurationError (one line, naming the
    field, never the url or the secret) when malformed."""
    if value is None:
        return None
    where = "metadata.notify"
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{where} must be a mapping {{url, on, secret}} or {{credential, on}}"
        )
    # YAML 1.1 reads a bare `on:` key as the boolean true (GitHub Actions' old trap)
    value = {("on" if key is True else key): item for key, item in value.items()}
    unknown = sorted(str(key) for key in set(value) - _NOTIFY_KEYS)
    if unknown:
        raise ConfigurationError(
            f"{where}: unknown keys {unknown}; allowed: {', '.join(sorted(_NOTIFY_KEYS))}"
        )
    url, credential, secret = value.get("url"), value.get("credential"), value.get("secret")
    if (url is None) == (credential is None):
        raise ConfigurationError(f"{where} needs exactly one of `url` or `credential`")
    if url is not None and (
        not isinstance(url, str) or not url.startswith(("http://", "https://"))
    ):
        raise ConfigurationError(f"{where}.url must be an http:// or https:// URL")
    if credential is not None and (not isinstance(credential, str) or not credential.strip()):
        raise ConfigurationError(f"{where}.credential must be a credential alias (a string)")
    if secret is not None and (credential is not None or not isinstance(secret, str)):
        raise ConfigurationError(
            f"{where}.secret must be a string next to `url` (a credential holds its own)"
        )
    on = parse_on(value["on"], f"{where}.on") if "on" in value else DEFAULT_ON
    return PlaybookNotify(on, url, secret or None, credential.strip() if credential else None)


def notify_of(metadata: Mapping[str, Any]) -> PlaybookNotify | None:
    """A playbook's parsed `metadata.notify`, or None (malformed too: validation refuses
    those before a playbook reaches the catalog)."""
    try:
        return parse_playbook_notify(metadata.get("notify"))
    except ConfigurationError:
        return None


def notification_id(execution_id: str, event: str, target: str) -> str:
    """Stable per execution, event and target: a receiver dedupes by it."""
    return f"{execution_id}.{event}.{target}"


def backoff_seconds(attempts: int, base: float, cap: float) -> float:
    """The wait after the `attempts`-th failed delivery: base, 2*base, 4*base ... <= cap."""
    if attempts < 1:
        return 0.0
    return float(min(cap, base * (2 ** min(attempts - 1, 30))))


def sign(body: bytes, secret: str) -> str:
    """`sha256=<hex>`: HMAC-SHA256 of the raw body (the X-Noetl-Signature header)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def short_duration(seconds: float | None) -> str:
    """3m12s, 1h05m, 42s."""
    if seconds is None:
        return "?"
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


_WORDS = {
    "completed": "COMPLETED",
    "failed": "FAILED",
    "cancelled": "CANCELLED",
    EVENT_AT_RISK: "AT RISK of missing its deadline",
    EVENT_MISSED: "MISSED its deadline",
}
TEXT_ERROR_CHARS = 300


def summary_text(path: str, event: str, seconds: float | None, error: str | None) -> str:
    """The Slack-compatible one line: `noetl: <path> FAILED after 3m12s: <error>`."""
    word = _WORDS.get(event, event.upper())
    joiner = "after" if event not in DEADLINE_EVENTS else "running for"
    line = f"noetl: {path} {word} {joiner} {short_duration(seconds)}"
    if error:
        first = " ".join(error.split())
        if len(first) > TEXT_ERROR_CHARS:
            first = first[: TEXT_ERROR_CHARS - 1] + "…"
        line += f": {first}"
    return line
