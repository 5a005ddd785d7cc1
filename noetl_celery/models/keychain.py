"""The `keychain` section: what each entry asks for, checked without resolving anything.

NoETL resolves a playbook's keychain when an execution starts (noetl/server/
keychain_processor.py) and its workers read the entries back by name when a command
renders (noetl/worker/keychain_resolver.py). Here the worker resolves them itself
(tools.keychain); this module only reads the declarations: the kind of every entry,
its scope, and what makes an entry unusable, so that a playbook is refused at
validation or at execution start rather than half-way through a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from noetl_celery.errors import PlaybookError

Scope = Literal["global", "execution"]

SUPPORTED_KINDS = frozenset({"static", "bearer", "credential", "credential_ref", "oauth2"})
# Kinds NoETL resolves against cloud services this engine does not talk to.
CLOUD_KINDS = {
    "secret_manager": "a cloud secret manager (GCP/AWS)",
    "google_id_token": "Google ID tokens",
    "google_oauth": "Google service-account tokens",
    "google_service_account": "Google service-account tokens",
    "google": "Google service-account tokens",
}
# Secret backends NoETL's Rust server resolves an entry from when it names a `provider`
# (noetl/server orchestrate-core/src/playbook.rs, `KeychainDef.provider`; src/secrets/).
# An entry with a `provider` is refused at execution start here, whatever its kind.
PROVIDERS = {
    "gcp": "Google Secret Manager",
    "aws": "AWS Secrets Manager",
    "azure": "Azure Key Vault",
    "vault": "HashiCorp Vault",
    "k8s": "Kubernetes secrets",
}
# NoETL's scope names: `local` is its spelling of one execution, the rest share the
# entry between executions (NoETL keys them by catalog id).
_SCOPES: dict[str, Scope] = {
    "execution": "execution",
    "local": "execution",
    "global": "global",
    "catalog": "global",
    "shared": "global",
}
# The field a kind cannot do without, and what to write instead.
_REQUIRED = {
    "static": ("map", "a `map:` of field names to values"),
    "bearer": ("token", "the `token:` value"),
    "oauth2": ("endpoint", "the token `endpoint:` URL"),
}


class KeychainInvalid(PlaybookError):
    """A keychain entry that cannot be resolved as written."""


@dataclass(frozen=True)
class KeychainEntry:
    """One declared entry; `spec` is the mapping as written (templates unrendered)."""

    name: str
    kind: str
    scope: Scope
    spec: Mapping[str, Any] = field(repr=False)

    @property
    def provider(self) -> str | None:
        """The secret backend NoETL would read the entry from (None: no provider)."""
        value = self.spec.get("provider")
        return str(value) if value not in (None, "") else None

    @property
    def supported(self) -> bool:
        return self.kind in SUPPORTED_KINDS and self.provider is None

    @property
    def credential_alias(self) -> Any:
        """`credential`/`credential_ref` entries: the alias (NoETL: `ref`, then
        `credential`, then the entry's own name)."""
        return self.spec.get("ref") or self.spec.get("credential") or self.name


def entry_problems(index: int, raw: Any) -> list[tuple[str | None, str]]:
    """What is wrong with entry `index` as (field or None, message); empty when usable
    (a cloud kind is usable to validation: it fails when an execution starts)."""
    where = f"keychain entry #{index + 1}"
    if not isinstance(raw, Mapping):
        return [(None, f"{where} must be a mapping with `name` and `kind`")]
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        return [("name", f"{where} needs a `name` (what `{{{{ keychain.<name> }}}}` reads)")]
    where = f"keychain entry '{name}'"
    kind = raw.get("kind", raw.get("type"))
    provider = raw.get("provider")
    if provider is not None and (not isinstance(provider, str) or not provider.strip()):
        return [("provider", f"{where}: `provider` must be a name such as gcp, aws, vault")]
    if provider is not None and (kind is None or isinstance(kind, str)):
        # NoETL's server reads it from that backend, whatever the kind says: usable to
        # validation (a warning), refused when an execution starts
        return _scope_problems(where, raw)
    if not isinstance(kind, str) or not kind:
        return [("kind", f"{where} needs a `kind`: one of {_kinds()}")]
    if kind not in SUPPORTED_KINDS and kind not in CLOUD_KINDS:
        return [("kind", f"{where}: unknown kind `{kind}`; use one of {_kinds()}")]
    problems = _scope_problems(where, raw)
    required = _REQUIRED.get(kind)
    if required is not None:
        key, what = required
        value = raw.get(key)
        if value is None or value == "" or value == {}:
            problems.append((key, f"{where} (kind {kind}) needs {what}"))
        elif key == "map" and not isinstance(value, Mapping):
            problems.append((key, f"{where}: `map` must be a mapping of field names to values"))
    if kind == "oauth2":
        for key in ("headers", "data", "json"):
            value = raw.get(key)
            if value is not None and not isinstance(value, Mapping):
                problems.append((key, f"{where}: `{key}` must be a mapping"))
    return problems


def _scope_problems(where: str, raw: Mapping[str, Any]) -> list[tuple[str | None, str]]:
    scope = raw.get("scope", "global")
    if not isinstance(scope, str) or scope not in _SCOPES:
        return [("scope", f"{where}: `scope: {scope}` is not one of global, execution")]
    return []


def _kinds() -> str:
    return ", ".join(sorted(SUPPORTED_KINDS))


def parse_keychain(section: Any) -> list[KeychainEntry]:
    """The entries of a playbook's `keychain`, in order; `KeychainInvalid` names the
    first unusable one (validation reports them all, with lines)."""
    if section is None or section == []:
        return []
    if not isinstance(section, list):
        raise KeychainInvalid("`keychain` must be a list of entries")
    entries: list[KeychainEntry] = []
    seen: set[str] = set()
    for index, raw in enumerate(section):
        problems = entry_problems(index, raw)
        if problems:
            raise KeychainInvalid(problems[0][1])
        name = str(raw["name"])
        if name in seen:
            raise KeychainInvalid(f"keychain entry '{name}' is declared twice; rename one")
        seen.add(name)
        kind = str(raw.get("kind", raw.get("type")) or "")
        scope = _SCOPES[str(raw.get("scope", "global"))]
        entries.append(KeychainEntry(name, kind, scope, dict(raw)))
    return entries


def unsupported_message(entry: KeychainEntry) -> str:
    """Why the entry cannot work here, naming its kind and provider, and what does."""
    provider = entry.provider
    if provider is not None:
        backend = PROVIDERS.get(provider.lower(), "a secret backend")
        what = f"secrets from {backend} (`provider: {provider}`)"
    else:
        what = CLOUD_KINDS.get(entry.kind, f"kind `{entry.kind}`")
    named = [f"kind {entry.kind}"] if entry.kind else []
    named += [f"provider {provider}"] if provider else []
    return (
        f"keychain entry '{entry.name}' ({', '.join(named)}) is not supported here: "
        f"noetl-celery does not reach {what}; put the secret in the credentials file "
        f"(NOETL_CREDENTIALS_FILE) and declare the entry as `kind: credential` with "
        f"`credential: <alias>` (the kinds that work here: {_kinds()})"
    )


def check_startable(section: Any) -> list[KeychainEntry]:
    """The entries, or `KeychainInvalid` for a malformed one or one of a kind that
    cannot work here (what an execution start refuses)."""
    entries = parse_keychain(section)
    for entry in entries:
        if not entry.supported:
            raise KeychainInvalid(unsupported_message(entry))
    return entries
