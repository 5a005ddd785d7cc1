"""Credential store: `auth` aliases in playbooks resolve to connection data here.

Accepted file shapes (YAML or JSON):

    {alias: {db_host, db_port, db_user, db_password, db_name}}      # NoETL payload
    {alias: {type: postgres, data: {db_host, ...}}}                 # NoETL record
    {alias: {dsn: "postgresql://..."}}  /  {alias: {url: ...}}
    [{name: alias, type: postgres, data: {...}}, ...]               # list of records
    {name: alias, type: postgres, data: {...}}                      # one record (fixture files)

Secret values never appear in an error raised here: messages name aliases and files only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from noetl_celery.errors import ConfigurationError, CredentialError
from noetl_celery.tools.redaction import credential_secrets

_URL_FIELDS = ("dsn", "url", "conninfo", "db_conn_string", "connection_string")
# (conninfo keyword, accepted field names in order of preference)
_PG_FIELDS = (
    ("host", ("db_host", "host", "hostname")),
    ("port", ("db_port", "port")),
    ("user", ("db_user", "user", "username")),
    ("password", ("db_password", "password")),
    ("dbname", ("db_name", "dbname", "database")),
    ("sslmode", ("db_sslmode", "sslmode")),
)
# `postgresql+psycopg://` (SQLAlchemy style) -> `postgresql://`, which libpq understands
_DRIVER_SUFFIX = re.compile(r"^(postgres(?:ql)?)\+\w+://", re.IGNORECASE)


@dataclass(frozen=True)
class Credential:
    """One resolved credential. `repr` hides the data so it can be logged safely."""

    alias: str
    type: str | None
    data: Mapping[str, Any] = field(repr=False)

    def get(self, *names: str) -> Any:
        """The first of `names` present with a non-empty value, else None."""
        for name in names:
            value = self.data.get(name)
            if value is not None and value != "":
                return value
        return None

    def postgres_conninfo(self) -> str:
        """A libpq conninfo string for this credential (may contain the password)."""
        return self._conninfo

    @cached_property
    def _conninfo(self) -> str:
        # built once per credential (~70 us with psycopg's quoting, once per postgres
        # tool call before): a credential never changes, a re-read file makes new ones.
        # An error is not cached: every call raises it again.
        from psycopg.conninfo import make_conninfo  # lazy: psycopg is slow to import

        url = self.get(*_URL_FIELDS)
        try:
            if url is not None:
                return make_conninfo(_DRIVER_SUFFIX.sub(r"\1://", str(url).strip()))
            params = {kw: str(v) for kw, names in _PG_FIELDS if (v := self.get(*names)) is not None}
            if "host" not in params and "dbname" not in params:
                raise CredentialError(
                    f"credential '{self.alias}' has no postgres connection fields "
                    "(expected db_host/db_port/db_user/db_password/db_name or dsn)"
                )
            return make_conninfo("", **params)
        except CredentialError:
            raise
        except Exception:  # psycopg.ProgrammingError: its text may quote the DSN, drop it
            raise CredentialError(
                f"credential '{self.alias}' does not hold a valid postgres connection string"
            ) from None


def _normalise(alias: str, entry: Any, source: str) -> Credential:
    if not isinstance(entry, Mapping):
        raise ConfigurationError(f"{source}: credential '{alias}' must be a mapping")
    data = entry.get("data")
    if isinstance(data, Mapping):  # NoETL record: {type, data: {...}}
        return Credential(alias, _opt_str(entry.get("type")), dict(data))
    return Credential(alias, _opt_str(entry.get("type")), dict(entry))


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _parse_entries(raw: Any, source: str) -> tuple[dict[str, Credential], list[Any]]:
    """The credentials by alias, and every entry as written (for its secrets)."""
    if raw is None:
        return {}, []
    if isinstance(raw, Mapping) and isinstance(raw.get("name"), str) and "data" in raw:
        raw = [raw]  # a single record, as in NoETL's fixture files
    if isinstance(raw, list):
        out: dict[str, Credential] = {}
        for index, entry in enumerate(raw):
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if not isinstance(name, str) or not name:
                raise ConfigurationError(f"{source}: credential #{index} needs a `name`")
            out[name] = _normalise(name, entry, source)
        return out, list(raw)
    if isinstance(raw, Mapping):
        entries = {
            str(alias): _normalise(str(alias), entry, source) for alias, entry in raw.items()
        }
        return entries, list(raw.values())
    raise ConfigurationError(f"{source}: expected a mapping or a list of credentials")


_NO_FILE = "<credentials>"  # the source of a store not read from a file


class CredentialStore:
    """Read-only alias -> `Credential` map; safe to share between threads."""

    def __init__(
        self, mapping: Mapping[str, Any] | list[Any] | None = None, *, source: str = _NO_FILE
    ) -> None:
        self.source = source
        self._entries, raw = _parse_entries(mapping, source)
        # per credential, over its whole entry (fields the engine does not use included):
        # an alias is a name, not a field (`pg_key`'s host is no secret), and a password
        # is told apart from its own credential's public names (redaction.credential_secrets)
        self._secrets = frozenset(secret for entry in raw for secret in credential_secrets(entry))

    @classmethod
    def empty(cls) -> CredentialStore:
        return cls(None)

    @classmethod
    def from_file(cls, path: str | Path) -> CredentialStore:
        """Load a YAML or JSON file; any problem raises ConfigurationError naming it."""
        file = Path(path).expanduser()
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(
                f"credentials file {file}: cannot read it ({exc.strerror or exc})"
            ) from exc
        except UnicodeDecodeError as exc:
            raise ConfigurationError(f"credentials file {file}: not UTF-8 text") from exc
        return cls(_load_text(text, file), source=f"credentials file {file}")

    def resolve(self, alias: str) -> Credential:
        """The credential for `alias`; CredentialError lists the known aliases."""
        try:
            return self._entries[alias]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "none"
            hint = ""
            if not self._entries and self.source == _NO_FILE:
                # the worker resolves `auth:`: the file must be in ITS environment
                hint = (
                    "; no credentials file is loaded here: set NOETL_CREDENTIALS_FILE in "
                    "the environment of the workers (and restart them)"
                )
            raise CredentialError(
                f"unknown credential '{alias}' (known aliases: {known}){hint}"
            ) from None

    def aliases(self) -> list[str]:
        return sorted(self._entries)

    def secret_values(self) -> frozenset[str]:
        """Every secret in the store, for the redactor."""
        return self._secrets

    def __contains__(self, alias: object) -> bool:
        return alias in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)


def _load_text(text: str, file: Path) -> Any:
    # Parser messages of YAML quote the offending line, which may hold a password:
    # report positions only.
    if file.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"credentials file {file}: invalid JSON at line {exc.lineno} column {exc.colno}"
            ) from None
        except RecursionError:  # json's C recursion guard: nested far too deep
            raise ConfigurationError(f"credentials file {file}: JSON nested too deep") from None
    import yaml  # lazy: only needed when a YAML file is configured

    from noetl_celery.models.yaml_safe import YamlLimitExceeded, safe_load

    try:  # the bounded loader: no alias bomb, no stack overflow (models.yaml_safe)
        return safe_load(text)
    except YamlLimitExceeded as exc:  # its messages quote no content
        where = f" (line {exc.line})" if exc.line else ""
        raise ConfigurationError(f"credentials file {file}{where}: {exc.message}") from None
    except ValueError:  # an integer past 4300 digits
        raise ConfigurationError(f"credentials file {file}: invalid YAML value") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise ConfigurationError(f"credentials file {file}: invalid YAML{where}") from None
