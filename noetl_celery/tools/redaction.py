"""Masking of secrets in text that leaves a tool: error messages, tracebacks, logs.

Every message a tool builds from foreign text (a database error, an exception, a URL)
goes through `Redactor.redact` before it reaches a result, an event or a log line.
Two layers: the literal secret values known from the credential store, and patterns
for secrets we cannot know in advance (`password=...` in a conninfo, `user:pass@` in a
URL, `token=...` in a query string).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

if TYPE_CHECKING:
    from noetl_celery.tools.credentials import CredentialStore

MASK = "***"

# Shorter "secrets" are not secret, and masking every "a" or "12" would shred messages.
MIN_SECRET_LENGTH = 3

# Field names whose values are secrets wherever they appear in a credential record.
_SECRET_FIELD = re.compile(r"password|passwd|pwd|secret|token|key", re.IGNORECASE)

# Fields that say where and as whom to connect, never how to prove it. Connection errors
# name them (`database "x" does not exist`, `connection to server at "h", port 5433`) and
# are useless without them, so they are never registered as secrets, not even inside a
# secret-looking mapping (`{"pg_secrets": {"db_host": ...}}`).
PUBLIC_FIELDS = frozenset(
    {
        "host",
        "hostname",
        "db_host",
        "port",
        "db_port",
        "user",
        "username",
        "db_user",
        "dbname",
        "db_name",
        "database",
        "sslmode",
        "db_sslmode",
    }
)
_CONNINFO_NAME = re.compile(r"\b(?:host|hostaddr|port|user|dbname)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)")

# `password=hunter2`, `api_token = 'x y'`, `?access_key=abc&...` (conninfo, query strings, logs)
_KEY_VALUE = re.compile(
    r"(?P<key>\b[\w.-]*(?:password|passwd|pwd|secret|token|api_?key|access_?key)[\w.-]*)"
    r"(?P<sep>\s*=\s*)"
    r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s&;,)]+)",
    re.IGNORECASE,
)
# `"password": "hunter2"` as it shows up in a repr or JSON dump
_QUOTED_KEY = re.compile(
    r"(?P<key>[\"'][\w.-]*(?:password|passwd|secret|token|api_?key|access_?key)[\w.-]*[\"']"
    r"\s*:\s*)(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")",
    re.IGNORECASE,
)
# `scheme://user:password@host`
_URL_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][\w+.-]*://[^:/@\s]*):(?P<pw>[^@\s/]*)@")


def is_secret_field(name: str) -> bool:
    """True for field names like `db_password`, `api_token`, `client_secret`, `key`."""
    return bool(_SECRET_FIELD.search(name))


def url_password(url: str) -> str | None:
    """The password embedded in a URL (`postgresql://u:pw@h/db`), if any."""
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def conninfo_password(conninfo: str) -> str | None:
    """The value of `password=` in a key/value conninfo string, unquoted."""
    match = re.search(r"\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", conninfo)
    if not match:
        return None
    return _conninfo_value(match.group(1))


def collect_secrets(record: Any) -> set[str]:
    """Every secret value in a (nested) credential record.

    Values of secret-named fields are secrets (everything under such a field too, but
    never a `PUBLIC_FIELDS` value); so are passwords embedded in DSN/URL strings,
    whatever field holds them. Give it one credential's record, not a whole file: an
    alias is not a field name (`pg_key` names a credential; its host is no secret).
    """
    found: set[str] = set()

    def walk(value: Any, secret: bool) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                name = str(key)
                public = name.lower() in PUBLIC_FIELDS
                walk(item, not public and (secret or is_secret_field(name)))
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item, secret)
        elif isinstance(value, str):
            if secret:
                found.add(value)
            for embedded in (
                url_password(value) if "://" in value else None,
                conninfo_password(value) if "=" in value else None,
            ):
                if embedded:
                    found.add(embedded)
        elif secret and isinstance(value, int | float) and not isinstance(value, bool):
            found.add(str(value))

    walk(record, False)
    return found


def public_values(record: Any) -> set[str]:
    """The host, port, user and database names a (nested) credential record states, in
    its fields or inside its DSN/URL/conninfo strings."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                if str(key).lower() in PUBLIC_FIELDS and isinstance(item, str | int):
                    if not isinstance(item, bool):
                        found.add(str(item))
                else:
                    walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            found.update(_connection_names(value))

    walk(record)
    found.discard("")
    return found


def _connection_names(text: str) -> set[str]:
    """User, host, port and database of a URL or a key/value conninfo string."""
    if "://" in text:
        try:
            url = urlsplit(text)
            names = [url.username, url.hostname, url.path.lstrip("/"), str(url.port or "")]
        except ValueError:
            return set()
        return {unquote(name) for name in names if name}
    return {_conninfo_value(raw) for raw in _CONNINFO_NAME.findall(text)}


def _conninfo_value(raw: str) -> str:
    if raw.startswith("'") and raw.endswith("'") and len(raw) >= 2:
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    return raw


def credential_secrets(record: Any) -> set[str]:
    """What to mask for one credential: `collect_secrets`, less a password that equals
    the credential's own user, host, port or database name (`noetl`/`noetl`). Masking
    that word would blank the very name a connection error must show, while the name is
    printed anyway wherever the credential is named (as in `postgresql://noetl:***@h/noetl`):
    the mask would hide nothing. Such a password is still masked where it stands as a
    password (`password=...`, `user:...@` in a URL: the patterns below)."""
    return collect_secrets(record) - public_values(record)


class Redactor:
    """Replaces known secret values and secret-looking patterns with `***`.

    Immutable after construction, hence safe to share between threads.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        variants: set[str] = set()
        for secret in secrets:
            if not secret or len(secret) < MIN_SECRET_LENGTH:
                continue
            # A password may show up raw, or percent-encoded as it sits in a URL.
            variants.update({secret, quote(secret, safe=""), unquote(secret)})
        # Longest first, so a secret that contains another is masked whole.
        ordered = sorted(
            (v for v in variants if len(v) >= MIN_SECRET_LENGTH), key=len, reverse=True
        )
        self._secrets = tuple(ordered)
        self._pattern = re.compile("|".join(re.escape(s) for s in ordered)) if ordered else None

    @classmethod
    def from_store(cls, store: CredentialStore) -> Redactor:
        """A redactor for every secret held by `store`."""
        return cls(store.secret_values())

    @property
    def secret_count(self) -> int:
        return len(self._secrets)

    def redact(self, text: str) -> str:
        """`text` with every secret replaced by `***`."""
        if not text:
            return text
        if self._pattern is not None:
            text = self._pattern.sub(MASK, text)
        text = _URL_USERINFO.sub(lambda m: f"{m.group('head')}:{MASK}@", text)
        text = _KEY_VALUE.sub(lambda m: f"{m.group('key')}{m.group('sep')}{MASK}", text)
        return _QUOTED_KEY.sub(lambda m: f"{m.group('key')}'{MASK}'", text)

    def redact_value(self, value: Any) -> Any:
        """Redact every string inside a JSON-like structure (keys are left alone)."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {k: self.redact_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_value(v) for v in value]
        return value


class _Chained(Redactor):
    """Two redactors applied in turn (the credentials file's, then a command's keychain
    values): no regular expression is compiled to combine them."""

    def __init__(self, first: Redactor, second: Redactor) -> None:
        self._first = first
        self._second = second

    @property
    def secret_count(self) -> int:
        return self._first.secret_count + self._second.secret_count

    def redact(self, text: str) -> str:
        return self._second.redact(self._first.redact(text))


class CommandMasks:
    """The keychain values one command resolved, masked wherever that command's text
    goes (tool errors, logs, its outcome). A ContextVar holds it for the command, so the
    commands that threads run side by side never share one; threads a command starts
    itself (a python step's timeout, the rows of a cursor frame run by its claim:
    worker.frame_rows) copy the context and see it too, so `add` takes a lock: two rows
    adding at once must not lose either's values."""

    __slots__ = ("_lock", "redactor")

    def __init__(self) -> None:
        self.redactor: Redactor | None = None
        self._lock = threading.Lock()

    def add(self, redactor: Redactor) -> None:
        if redactor.secret_count:
            with self._lock:
                current = self.redactor
                self.redactor = redactor if current is None else _Chained(current, redactor)


_masks: ContextVar[CommandMasks | None] = ContextVar("noetl_command_masks", default=None)


@contextmanager
def command_masks() -> Iterator[CommandMasks]:
    """Open a command's masks (worker.execute, around one command)."""
    masks = CommandMasks()
    token = _masks.set(masks)
    try:
        yield masks
    finally:
        _masks.reset(token)


def current_masks() -> CommandMasks | None:
    return _masks.get()


def with_command_masks(redactor: Redactor) -> Redactor:
    """`redactor`, followed by the current command's keychain masks when it has some."""
    masks = _masks.get()
    if masks is None or masks.redactor is None:
        return redactor
    return _Chained(redactor, masks.redactor)


def mask_command_value(value: Any) -> Any:
    """`value` with the current command's keychain values masked (nothing else)."""
    masks = _masks.get()
    if masks is None or masks.redactor is None:
        return value
    return masks.redactor.redact_value(value)
