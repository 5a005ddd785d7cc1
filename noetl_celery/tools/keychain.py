"""Resolving a playbook's `keychain` on the worker, cached per process.

Where NoETL keeps resolved entries (noetl/server/keychain_processor.py stores them,
encrypted, in its `noetl.keychain` table; noetl/worker/keychain_resolver.py reads them
back and renews a token expiring within 300 s), this engine keeps them in the memory
of the process that runs the commands, and nowhere else: Postgres holds the
declarations (the playbook) and what the commands produced, masked, never a resolved
value. Each worker process resolves an entry the first time one of its commands needs
the keychain, and keeps it:

- `scope: global` (NoETL's default): one value per playbook path and definition, shared
  by every execution the process runs (a token is fetched once, not per execution);
- `scope: execution`: one value per execution.

An `oauth2` token is fetched again before it expires (when less than
`REFRESH_MARGIN_SECONDS`, at most half its lifetime, is left); its cache key holds
what its fields rendered to, so a rotated client secret gets a new token. Static, bearer
and credential entries involve no I/O and are made afresh for every command (a
credential rotated in the credentials file is seen at once).

Errors name the entry and the endpoint, never a value: a token endpoint's error body is
reduced to its OAuth `error` code.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from noetl_celery.errors import CredentialError, NoetlError, TemplateError, ToolError
from noetl_celery.models.durations import to_seconds
from noetl_celery.models.keychain import KeychainEntry, check_startable
from noetl_celery.models.outcome import ErrorKind
from noetl_celery.templating import STRICT
from noetl_celery.tools.redaction import (
    PUBLIC_FIELDS,
    Redactor,
    credential_secrets,
    is_secret_field,
)

if TYPE_CHECKING:
    import httpx

    from noetl_celery.tools.credentials import CredentialStore

# NoETL's worker renews a token whose remaining life is below 300 s
REFRESH_MARGIN_SECONDS = 300.0
# a token endpoint that gives no `expires_in`: NoETL's default lifetime of a token entry
DEFAULT_TOKEN_SECONDS = 3600.0
# resolved entries one process keeps (execution-scoped ones of finished runs age out)
CACHE_SIZE = 1024
# credential types NoETL turns into a Google access or ID token
_GOOGLE_CREDENTIALS = frozenset({"google_oauth", "google_service_account", "gcp"})
# fields of a token response that say how to use the token, not what it is
_TOKEN_METADATA = frozenset({"token_type", "expires_in", "ext_expires_in", "scope", "not-before"})


class KeychainError(ToolError):
    """An entry could not be resolved; the message names it and never quotes a value.
    `kind` is the error kind the command fails with (`connection`, `timeout` and `auth`
    as for an HTTP step, else `config_error`)."""

    def __init__(self, message: str, kind: ErrorKind = "config_error") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class _Cached:
    data: dict[str, Any]
    secrets: frozenset[str]
    refresh_at: float | None  # monotonic time after which a token is fetched again


def entry_secrets(entry: KeychainEntry, data: Mapping[str, Any]) -> set[str]:
    """What to mask of a resolved entry. A static map or a bearer token: every value
    except where and as whom it connects (`PUBLIC_FIELDS`) and a token's metadata
    (`token_type: Bearer`): the keychain is where a playbook declares its secrets. A
    credential: what the credentials file masks of it (its secret-named fields:
    `client_secret`, not `client_id`). A token response: its secret-named fields
    (`access_token`, `refresh_token`, `id_token`)."""
    if entry.kind in ("credential", "credential_ref"):
        return credential_secrets(data)
    found: set[str] = set()

    def walk(value: Any, name: str) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, str(key))
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item, name)
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            lowered = name.lower()
            if lowered in PUBLIC_FIELDS or lowered in _TOKEN_METADATA:
                return
            if entry.kind == "oauth2" and not is_secret_field(lowered):
                return
            found.add(str(value))

    walk(data, "")
    return found


class Keychain:
    """The resolved entries of this process; safe to share between threads."""

    def __init__(
        self,
        http: Callable[[], httpx.Client],
        credentials: Callable[[], CredentialStore],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._http = http
        self._credentials = credentials
        self._clock = clock
        self._lock = threading.Lock()
        self._key_locks: dict[tuple[str, ...], threading.Lock] = {}
        self._cache: OrderedDict[tuple[str, ...], _Cached] = OrderedDict()
        # one redactor per set of values: a loop's commands do not compile one each
        self._redactors: dict[frozenset[str], Redactor] = {}

    def resolve(
        self, section: Any, *, playbook: str, execution_id: str, context: Mapping[str, Any]
    ) -> tuple[dict[str, Any], Redactor]:
        """Every entry of `section` in order, rendered against `context` (the command's:
        the variables, also as `workload`) where a template may read an earlier entry as
        `keychain.<name>`; and a redactor for their values."""
        try:
            entries = check_startable(section)
        except NoetlError as exc:
            raise KeychainError(str(exc)) from None
        resolved: dict[str, Any] = {}
        secrets: set[str] = set()
        for entry in entries:
            cached = self._entry(entry, playbook, execution_id, context, resolved)
            resolved[entry.name] = cached.data
            secrets |= cached.secrets
        return resolved, self._redactor(frozenset(secrets))

    def _redactor(self, secrets: frozenset[str]) -> Redactor:
        with self._lock:
            redactor = self._redactors.get(secrets)
            if redactor is None:
                if len(self._redactors) >= CACHE_SIZE:
                    self._redactors.clear()
                redactor = self._redactors[secrets] = Redactor(secrets)
            return redactor

    # ---- one entry -----------------------------------------------------------------------------
    def _entry(
        self,
        entry: KeychainEntry,
        playbook: str,
        execution_id: str,
        context: Mapping[str, Any],
        earlier: Mapping[str, Any],
    ) -> _Cached:
        spec = _render(entry, {**context, "keychain": dict(earlier)})
        if entry.kind != "oauth2":
            # no I/O: made afresh, so a credential rotated in the file is seen at once
            return self._fetch(entry, spec)
        owner = execution_id if entry.scope == "execution" else f"global:{playbook}"
        key = (owner, entry.name, _digest(spec))
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # one token request per key, however many threads want it
            cached = self._fresh(key)
            if cached is None:
                cached = self._fetch(entry, spec)
                self._store(key, cached)
            return cached

    def _fresh(self, key: tuple[str, ...]) -> _Cached | None:
        with self._lock:
            cached = self._cache.get(key)
            if cached is None:
                return None
            if cached.refresh_at is not None and self._clock() >= cached.refresh_at:
                del self._cache[key]
                return None
            self._cache.move_to_end(key)
            return cached

    def _store(self, key: tuple[str, ...], cached: _Cached) -> None:
        with self._lock:
            self._cache[key] = cached
            while len(self._cache) > CACHE_SIZE:
                old, _ = self._cache.popitem(last=False)
                self._key_locks.pop(old, None)

    def _fetch(self, entry: KeychainEntry, spec: Mapping[str, Any]) -> _Cached:
        refresh_at = None
        if entry.kind == "static":
            data = dict(spec["map"])
        elif entry.kind == "bearer":
            data = {"access_token": spec["token"], "token_type": "Bearer"}
        elif entry.kind in ("credential", "credential_ref"):
            data = self._credential(entry, spec)
        else:  # oauth2
            data, lifetime = self._token(entry, spec)
            margin = min(REFRESH_MARGIN_SECONDS, lifetime / 2)
            refresh_at = self._clock() + lifetime - margin
        return _Cached(data, frozenset(entry_secrets(entry, data)), refresh_at)

    def _credential(self, entry: KeychainEntry, spec: Mapping[str, Any]) -> dict[str, Any]:
        alias = str(spec.get("ref") or spec.get("credential") or entry.name)
        try:
            found = self._credentials().resolve(alias)
        except (CredentialError, NoetlError) as exc:
            raise KeychainError(f"keychain entry '{entry.name}': {exc}") from None
        if found.type in _GOOGLE_CREDENTIALS:
            # NoETL mints a Google token from such a credential (GoogleTokenProvider)
            raise KeychainError(
                f"keychain entry '{entry.name}': credential '{alias}' is of type "
                f"{found.type}, whose Google tokens are not supported here; store the "
                "token or API key itself in the credentials file"
            )
        return dict(found.data)

    def _token(self, entry: KeychainEntry, spec: Mapping[str, Any]) -> tuple[dict[str, Any], float]:
        """An OAuth2 token request (NoETL: form `data`, POST by default)."""
        import httpx  # lazy: ~90 ms import

        url = str(spec["endpoint"])
        where = f"keychain entry '{entry.name}': token endpoint {_safe_url(url)}"
        kwargs: dict[str, Any] = {"headers": {str(k): str(v) for k, v in _map(spec, "headers")}}
        if spec.get("data"):
            kwargs["data"] = {str(k): _form_value(v) for k, v in _map(spec, "data")}
        if spec.get("json"):
            kwargs["json"] = dict(spec["json"])
        method = str(spec.get("method") or "POST").upper()
        try:
            response = self._http().request(method, url, **kwargs)
        except httpx.TimeoutException:
            raise KeychainError(f"{where} did not answer in time", "timeout") from None
        except httpx.HTTPError as exc:
            raise KeychainError(
                f"{where} is unreachable ({type(exc).__name__})", "connection"
            ) from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            code = body.get("error") if isinstance(body, dict) else None
            said = f" ({code})" if isinstance(code, str) and code.isidentifier() else ""
            kind: ErrorKind = "auth" if response.status_code in (400, 401, 403) else "config_error"
            raise KeychainError(f"{where} answered HTTP {response.status_code}{said}", kind)
        if not isinstance(body, dict):
            raise KeychainError(f"{where} answered with no JSON object")
        if isinstance(body.get("data"), dict) and "access_token" not in body:
            body = body["data"]  # NoETL's renewal accepts a wrapped response too
        if not body.get("access_token"):
            raise KeychainError(f"{where} answered without an `access_token`")
        # NoETL: the entry's `ttl_seconds` wins over the answer's `expires_in`; either
        # may be a number of seconds or a duration string ("55m")
        lifetime = to_seconds(spec.get("ttl_seconds") or body.get("expires_in") or 0) or 0.0
        if lifetime <= 0:
            lifetime = DEFAULT_TOKEN_SECONDS
        return dict(body), max(lifetime, 0.0)


def _render(entry: KeychainEntry, context: Mapping[str, Any]) -> dict[str, Any]:
    """The entry's fields rendered (strict: an undefined name fails, naming the field)."""
    spec = {k: v for k, v in entry.spec.items() if k not in ("name", "kind", "type", "scope")}
    try:
        rendered = STRICT.value(spec, context, f"keychain entry '{entry.name}'")
    except TemplateError as exc:
        raise KeychainError(str(exc)) from None
    assert isinstance(rendered, dict)
    return rendered


def _map(spec: Mapping[str, Any], key: str) -> list[tuple[Any, Any]]:
    value = spec.get(key)
    return list(value.items()) if isinstance(value, Mapping) else []


def _form_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _digest(spec: Mapping[str, Any]) -> str:
    text = json.dumps(spec, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _safe_url(url: str) -> str:
    """The endpoint without its query string or user info (either may hold a secret)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<invalid URL>"
    return f"{parts.scheme}://{host}{port}{parts.path}"
