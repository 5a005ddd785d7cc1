"""The notification settings (NOETL_NOTIFY_*, NOETL_PUBLIC_URL; docs/operations/
notifications.md), read with the rest of `Settings`. `repr` hides the url and secret."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from noetl_celery.errors import ConfigurationError

# what a target can ask to be told about (`on`)
ON_COMPLETED = "completed"
ON_FAILED = "failed"
ON_CANCELLED = "cancelled"
ON_DEADLINE = "deadline"
ON_CHOICES = (ON_COMPLETED, ON_FAILED, ON_CANCELLED, ON_DEADLINE)
DEFAULT_ON = frozenset({ON_FAILED, ON_CANCELLED, ON_DEADLINE})

DEFAULT_BACKOFF_SECONDS = 5.0  # the first retry's wait, doubled per failure
DEFAULT_BACKOFF_MAX_SECONDS = 600.0  # never more than this between two tries


@dataclass(frozen=True)
class NotifySettings:
    url: str = ""  # NOETL_NOTIFY_URL; empty: no engine-wide target
    secret: str = ""  # NOETL_NOTIFY_SECRET: signs the body (X-Noetl-Signature)
    on: frozenset[str] = DEFAULT_ON  # NOETL_NOTIFY_ON
    backoff_seconds: float = DEFAULT_BACKOFF_SECONDS  # NOETL_NOTIFY_BACKOFF_SECONDS
    backoff_max_seconds: float = DEFAULT_BACKOFF_MAX_SECONDS  # NOETL_NOTIFY_BACKOFF_MAX_SECONDS
    public_url: str = ""  # NOETL_PUBLIC_URL: serve's address, for the payload's `url`

    def __repr__(self) -> str:
        url = "***" if self.url else ""
        return f"NotifySettings(url={url!r}, on={sorted(self.on)}, public_url={self.public_url!r})"


def parse_on(value: Any, where: str) -> frozenset[str]:
    """`on` as a list (or a comma-separated string) of ON_CHOICES; ConfigurationError
    naming `where` otherwise."""
    items: Iterable[Any]
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list):
        items = value
    else:
        raise ConfigurationError(
            f"{where} must be a list of {', '.join(ON_CHOICES)}, got {type(value).__name__}"
        )
    chosen = set()
    for item in items:
        if not isinstance(item, str) or item.strip().lower() not in ON_CHOICES:
            raise ConfigurationError(f"{where}: {item!r} is not one of {', '.join(ON_CHOICES)}")
        chosen.add(item.strip().lower())
    if not chosen:
        raise ConfigurationError(f"{where} is empty; name at least one of {', '.join(ON_CHOICES)}")
    return frozenset(chosen)


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds, got {raw!r}")
    return value


def notify_settings(env: Mapping[str, str]) -> NotifySettings:
    url = env.get("NOETL_NOTIFY_URL", "").strip()
    if url and not url.startswith(("http://", "https://")):
        raise ConfigurationError("NOETL_NOTIFY_URL must be an http:// or https:// URL")
    raw_on = env.get("NOETL_NOTIFY_ON", "").strip()
    on = parse_on(raw_on, "NOETL_NOTIFY_ON") if raw_on else DEFAULT_ON
    base = _seconds(env, "NOETL_NOTIFY_BACKOFF_SECONDS", DEFAULT_BACKOFF_SECONDS)
    cap = _seconds(env, "NOETL_NOTIFY_BACKOFF_MAX_SECONDS", DEFAULT_BACKOFF_MAX_SECONDS)
    return NotifySettings(
        url=url,
        secret=env.get("NOETL_NOTIFY_SECRET", "").strip(),
        on=on,
        backoff_seconds=base,
        backoff_max_seconds=max(cap, base),
        public_url=env.get("NOETL_PUBLIC_URL", "").strip().rstrip("/"),
    )
