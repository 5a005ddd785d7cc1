"""The shapes of the routes NoETL's GUI (v1.11) calls beyond its CLI's (web.api_gui): the
run dialog's form inferred from a playbook's `workload`, credentials without their
secrets, the dashboard's counts, the token check's user.

Credentials: an entry shows only the fields named in `PUBLIC_FIELDS` (host, port, user,
database, ...) whose value is not one of the store's secrets; every other field (a
password, token, key, secret, DSN or URL, which may hold a password) is named in
`meta.hidden_fields` and never served, whatever `include_data` asks.

The shapes are TypedDicts the routes declare as their response models (as in
noetl_shapes: only declared keys are answered).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping
from typing import Any

from typing_extensions import TypedDict

from noetl_celery.constants import ExecutionStatus
from noetl_celery.tools.credentials import Credential
from noetl_celery.tools.redaction import is_secret_field
from noetl_celery.web.noetl_events import iso
from noetl_celery.web.noetl_shapes import ExecutionEntry

# field names a credential may show (values that are plain scalars only)
PUBLIC_FIELDS = frozenset(
    {
        "db_host",
        "host",
        "hostname",
        "db_port",
        "port",
        "db_user",
        "user",
        "username",
        "db_name",
        "dbname",
        "database",
        "db_sslmode",
        "sslmode",
        "schema",
        "region",
        "project",
        "project_id",
        "account",
        "warehouse",
        "client_id",
        "token_url",
        "scope",
        "scopes",
        "base_url",
        "endpoint",
    }
)
SECRETS_NOTE = (
    "served without secrets: passwords, tokens, keys and connection strings stay in "
    "NOETL_CREDENTIALS_FILE whatever include_data asks"
)
MANAGED_IN_FILE = (
    "credentials are managed in the file NOETL_CREDENTIALS_FILE names; "
    "serve lists them (without secrets) and does not change them"
)


class User(TypedDict):
    id: str
    email: str | None
    name: str
    display_name: str
    roles: list[str]


USER: User = {
    "id": "api",
    "email": None,
    "name": "noetl-celery",
    "display_name": "noetl-celery API",
    "roles": ["admin"],
}


# ---- run dialog (GET /catalog/{path}/ui_schema) --------------------------------------------
def field_kind(value: Any) -> str:
    """The form kind of a workload default, as NoETL's server infers it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string"


def _plain(value: Any) -> Any:
    """A YAML default as JSON (a date or timestamp as its ISO text)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return value


class UiField(TypedDict):
    name: str
    kind: str
    default: Any  # the workload's default as written: any JSON
    description: None
    secret: bool
    credential_glob: None
    options: None
    children: list[UiField] | None  # an object default's keys


class UiSchema(TypedDict):
    """NoETL's `UiSchemaResponse` (`ui_schema`)."""

    path: str
    version: int
    kind: str
    title: str | None
    description_markdown: str | None
    exposed_in_ui: bool
    fields: list[UiField]
    generated_at: str | None


def ui_field(name: str, value: Any) -> UiField:
    kind = field_kind(value)
    children = (
        [ui_field(str(k), v) for k, v in value.items()] if isinstance(value, Mapping) else None
    )
    return {
        "name": name,
        "kind": kind,
        "default": _plain(value),
        "description": None,
        "secret": is_secret_field(name),
        "credential_glob": None,
        "options": None,
        "children": children,
    }


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def ui_schema(path: str, version: int, document: Any, generated_at: dt.datetime) -> UiSchema:
    """NoETL's `UiSchemaResponse` for a playbook's parsed YAML."""
    data: Mapping[str, Any] = document if isinstance(document, Mapping) else {}
    metadata = _mapping(data.get("metadata"))
    workload = _mapping(data.get("workload"))
    name, description = metadata.get("name"), metadata.get("description")
    return {
        "path": path,
        "version": version,
        "kind": "playbook",
        "title": None if name is None else str(name),
        "description_markdown": None if description is None else str(description),
        "exposed_in_ui": bool(metadata.get("exposed_in_ui", False)),
        "fields": [ui_field(str(k), v) for k, v in workload.items()],
        "generated_at": iso(generated_at),
    }


# ---- credentials (GET /credentials[/{id}]) -------------------------------------------------
def credential_type(credential: Credential) -> str:
    if credential.type:
        return credential.type
    if credential.get("db_host", "host", "db_name", "dbname") is not None:
        return "postgres"
    return "generic"


def public_fields(credential: Credential, secrets: Collection[str]) -> dict[str, Any]:
    shown: dict[str, Any] = {}
    for name, value in credential.data.items():
        if name not in PUBLIC_FIELDS or is_secret_field(name):
            continue
        if not isinstance(value, str | int | float | bool) or str(value) in secrets:
            continue
        shown[name] = value
    return shown


class CredentialMeta(TypedDict):
    source: str
    fields: dict[str, Any]  # the public fields shown, by name (PUBLIC_FIELDS)
    hidden_fields: list[str]
    secrets: str


class CredentialEntry(TypedDict):
    """NoETL's `CredentialResponse` (`credential_entry`)."""

    id: str
    name: str
    type: str
    meta: CredentialMeta
    tags: list[str]
    description: str
    data: dict[str, Any] | None  # the public fields again, with include_data
    created_at: str | None
    updated_at: str | None


class CredentialFilter(TypedDict):
    type: str | None
    q: str | None


class CredentialList(TypedDict):
    items: list[CredentialEntry]
    filter: CredentialFilter
    note: str


class ManagedInFile(TypedDict):
    """The 405 of a credential write (the GUI shows `error`)."""

    detail: str
    error: str


def credential_entry(
    credential: Credential,
    secrets: Collection[str],
    updated: dt.datetime | None,
    *,
    include_data: bool,
) -> CredentialEntry:
    """NoETL's `CredentialResponse` for one alias: `data` holds its public fields only
    (with `include_data`; None otherwise)."""
    shown = public_fields(credential, secrets)
    hidden = sorted(str(name) for name in credential.data if name not in shown)
    return {
        "id": credential.alias,
        "name": credential.alias,
        "type": credential_type(credential),
        "meta": {
            "source": "NOETL_CREDENTIALS_FILE",
            "fields": shown,
            "hidden_fields": hidden,
            "secrets": SECRETS_NOTE,
        },
        "tags": [],
        "description": "from NOETL_CREDENTIALS_FILE, without its secrets",
        "data": shown if include_data else None,
        "created_at": iso(updated),
        "updated_at": iso(updated),
    }


def matches(entry: Mapping[str, Any], kind: str | None, query: str | None) -> bool:
    if kind and str(entry["type"]).lower() != kind.lower():
        return False
    if query:
        q = query.lower()
        return q in str(entry["name"]).lower() or q in str(entry["type"]).lower()
    return True


# ---- dashboard (GET /dashboard/stats) ------------------------------------------------------
class CatalogCounts(TypedDict):
    paths: int
    versions: int


class ScheduleCounts(TypedDict):
    total: int
    enabled: int


class DashboardStats(TypedDict):
    """NoETL's Rust server's `stats`."""

    total_executions: int
    successful_executions: int
    failed_executions: int
    cancelled_executions: int
    running_executions: int
    total_playbooks: int
    total_workers: None  # not known here: workers do not register with serve


class DashboardBody(TypedDict):
    """The GUI's `DashboardStats` fields and NoETL's Rust server's `{status, stats}`."""

    total_playbooks: int
    total_executions: int
    active_executions: int
    success_rate: float
    recent_executions: list[ExecutionEntry]
    executions_by_status: dict[str, int]
    catalog: CatalogCounts
    schedules: ScheduleCounts
    status: str
    stats: DashboardStats


def dashboard_body(
    by_status: Mapping[str, int],
    catalog_paths: int,
    catalog_versions: int,
    schedules: int,
    schedules_enabled: int,
    recent: list[ExecutionEntry],
) -> DashboardBody:
    """The GUI's `DashboardStats` fields and NoETL's Rust server's `{status, stats}`."""
    total = sum(by_status.values())
    completed = by_status.get(ExecutionStatus.COMPLETED, 0)
    failed = by_status.get(ExecutionStatus.FAILED, 0)
    ended = completed + failed
    running = by_status.get(ExecutionStatus.RUNNING, 0)
    return {
        "total_playbooks": catalog_paths,
        "total_executions": total,
        "active_executions": running,
        "success_rate": round(100.0 * completed / ended, 1) if ended else 0.0,
        "recent_executions": recent,
        "executions_by_status": dict(sorted(by_status.items())),
        "catalog": {"paths": catalog_paths, "versions": catalog_versions},
        "schedules": {"total": schedules, "enabled": schedules_enabled},
        "status": "success",
        "stats": {
            "total_executions": total,
            "successful_executions": completed,
            "failed_executions": failed,
            "cancelled_executions": by_status.get(ExecutionStatus.CANCELLED, 0),
            "running_executions": running,
            "total_playbooks": catalog_paths,
            "total_workers": None,
        },
    }
