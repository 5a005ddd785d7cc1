"""The routes NoETL's GUI (v1.11) calls beyond those of its CLI (web.api_noetl), under
`/api`; the shapes are web.gui_shapes'.

    GET    /catalog/{path}/ui_schema?version=   the run dialog's form from `workload`
    GET    /catalog/playbook/content?playbook_id=ID|PATH  -> {content, path, version, catalog_id}
    PUT    /catalog/playbook/content?playbook_id=  {content}: a new version of that path
    POST   /catalog/playbooks/validate  {content} -> {valid, errors: [str], warnings: [str]}
    POST   /executions/{id}/stop        cancel's alias (409 once ended, 404 unknown)
    GET    /credentials[?type&q]        NOETL_CREDENTIALS_FILE's aliases, no secret ever
    GET    /credentials/{id}[?include_data]
    POST   /credentials, DELETE /credentials/{id}   405: the file is the place
    POST   /auth/validate  {session_token} -> {valid, user}  (open: web.auth.OPEN_PATHS)
    GET    /dashboard/stats             executions by status, catalog, schedules
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from typing_extensions import TypedDict
from yaml import YAMLError

from noetl_celery.engine import compat
from noetl_celery.engine.service import Engine
from noetl_celery.errors import CatalogNotFound, CredentialNotFound
from noetl_celery.models.validation import CredentialAliases, load_playbook, validate_text
from noetl_celery.models.yaml_safe import safe_load
from noetl_celery.settings import Settings
from noetl_celery.store.rows import CatalogRow
from noetl_celery.web import gui_shapes as gui
from noetl_celery.web import noetl_inputs
from noetl_celery.web import noetl_shapes as shapes
from noetl_celery.web.api_noetl import JsonBody, cancel_answer
from noetl_celery.web.auth import ApiAuth
from noetl_celery.web.deps import EngineDep
from noetl_celery.web.inputs import CheckedRoute, digits
from noetl_celery.web.noetl_inputs import ShapeError
from noetl_celery.web.noetl_shapes import AlreadyEnded, CancelBody, RegisterBody

# the answers only these routes give (the others: noetl_shapes, gui_shapes)


class PlaybookContent(TypedDict):
    content: str
    path: str
    version: int
    catalog_id: str


class Validation(TypedDict):
    valid: bool
    errors: list[str]
    warnings: list[str]


class TokenValid(TypedDict):
    valid: bool
    user: gui.User


class TokenRefused(TypedDict):
    valid: bool
    detail: str


MANAGED_IN_FILE: dict[int | str, dict[str, Any]] = {
    405: {"model": gui.ManagedInFile, "description": "Credentials are kept in their file"}
}

router = APIRouter(prefix="/api", tags=["noetl"], route_class=CheckedRoute)

PlaybookId = Annotated[str, Query(min_length=1, max_length=1000)]


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _content(body: dict[str, Any]) -> str:
    content = body.get("content")
    if not isinstance(content, str):
        raise ShapeError("content", "must be the playbook's YAML text")
    return content


def _entry(engine: Engine, playbook_id: str) -> CatalogRow:
    """The version a GUI id names: a catalog_id (digits) or a path's latest."""
    if digits(playbook_id) is not None:
        return compat.catalog_entry(engine, catalog_id=noetl_inputs.parse_catalog_id(playbook_id))
    return compat.catalog_entry(engine, path=playbook_id)


# ---- catalog -------------------------------------------------------------------------------
@router.get("/catalog/playbook/content")
def playbook_content(playbook_id: PlaybookId, engine: EngineDep) -> PlaybookContent:
    row = _entry(engine, playbook_id)
    return {
        "content": row.content,
        "path": row.path,
        "version": row.version,
        "catalog_id": str(row.catalog_id),
    }


@router.put("/catalog/playbook/content")
def save_playbook_content(
    playbook_id: PlaybookId, body: JsonBody, engine: EngineDep
) -> RegisterBody:
    """Register `content` as a new version of the playbook `playbook_id` names (the same
    content: the same version); 422 when the content names another path."""
    text = noetl_inputs.decode_content(_content(body))
    try:
        path = _entry(engine, playbook_id).path
    except CatalogNotFound:
        if digits(playbook_id) is not None:
            raise
        path = playbook_id  # a path not registered yet: its first version
    given = load_playbook(text).catalog_path  # PlaybookInvalid: 422 naming every problem
    if given != path:
        raise ShapeError(
            "content", f"names the playbook '{given}', not '{path}' (its metadata.path)"
        )
    _, entry = engine.register_text(text, install_schedule=True)
    return shapes.register_body(entry.path, entry.version, entry.catalog_id, entry.created)


@router.post("/catalog/playbooks/validate")
def validate(body: JsonBody, engine: EngineDep, settings: SettingsDep) -> Validation:
    """What `noetl-celery validate` prints, one string per problem (`auth:` aliases are
    checked against NOETL_CREDENTIALS_FILE when it is set)."""
    aliases = CredentialAliases(None)
    if settings.credentials_file:
        store = engine.services.credentials
        aliases = CredentialAliases(frozenset(store.aliases()), store.source)
    report = validate_text(_content(body), credentials=aliases)
    return {
        "valid": report.ok,
        "errors": [str(p) for p in report.errors],
        "warnings": [str(p) for p in report.warnings],
    }


@router.get("/catalog/{path:path}/ui_schema")
def ui_schema(path: str, engine: EngineDep, version: str = "latest") -> gui.UiSchema:
    """The run dialog's form: one field per `workload` key, its kind from its default."""
    row = compat.catalog_entry(engine, path=path, version=noetl_inputs.parse_version(version))
    try:
        document = safe_load(row.content)
    except YAMLError:  # registered text always parses; a form is a hint, never an error
        document = None
    return gui.ui_schema(row.path, row.version, document, _now())


# ---- executions ----------------------------------------------------------------------------
@router.post(
    "/executions/{execution_id}/stop",
    response_model=CancelBody,
    responses={409: {"model": AlreadyEnded, "description": "The execution had already ended"}},
)
def stop(execution_id: str, body: JsonBody, engine: EngineDep) -> CancelBody | JSONResponse:
    """The GUI's Stop: cancel (the execution and its running children end CANCELLED);
    409 once it has ended, 404 for an unknown id."""
    reason = body.get("reason")
    return cancel_answer(engine, execution_id, str(reason) if reason else "stopped from the GUI")


# ---- credentials ---------------------------------------------------------------------------
def _credentials(
    engine: Engine, settings: Settings, *, include_data: bool
) -> dict[str, gui.CredentialEntry]:
    if not settings.credentials_file:
        return {}
    store = engine.services.credentials  # ConfigurationError (500) names a bad file
    try:
        mtime = Path(settings.credentials_file).expanduser().stat().st_mtime
        updated: dt.datetime | None = dt.datetime.fromtimestamp(mtime, dt.UTC).replace(tzinfo=None)
    except OSError:
        updated = None
    secrets = store.secret_values()
    return {
        alias: gui.credential_entry(
            store.resolve(alias), secrets, updated, include_data=include_data
        )
        for alias in store.aliases()
    }


@router.get("/credentials")
def credentials(
    engine: EngineDep,
    settings: SettingsDep,
    kind: Annotated[str | None, Query(alias="type")] = None,
    q: str | None = None,
) -> gui.CredentialList:
    """The aliases of NOETL_CREDENTIALS_FILE with their kind and public fields; never a
    password, token, key or connection string."""
    entries = _credentials(engine, settings, include_data=False).values()
    return {
        "items": [e for e in entries if gui.matches(e, kind, q)],
        "filter": {"type": kind, "q": q},
        "note": gui.SECRETS_NOTE,
    }


@router.get("/credentials/{identifier}")
def credential(
    identifier: str, engine: EngineDep, settings: SettingsDep, include_data: bool = False
) -> gui.CredentialEntry:
    """One alias; `data` (with include_data) holds its public fields only."""
    found = _credentials(engine, settings, include_data=include_data).get(identifier)
    if found is None:
        raise CredentialNotFound(f"no credential '{identifier}' in NOETL_CREDENTIALS_FILE")
    return found


def _managed_in_file() -> JSONResponse:
    line = gui.MANAGED_IN_FILE
    # `error` too: the GUI's secrets page shows that field of a failed answer
    body: gui.ManagedInFile = {"detail": line, "error": line}
    return JSONResponse(body, status_code=405, headers={"Allow": "GET"})


@router.post("/credentials", status_code=405, response_model=None, responses=MANAGED_IN_FILE)
def credential_save(body: JsonBody) -> JSONResponse:
    """Refused (405): the credentials file is where credentials are kept."""
    del body
    return _managed_in_file()


@router.delete(
    "/credentials/{identifier}", status_code=405, response_model=None, responses=MANAGED_IN_FILE
)
def credential_delete(identifier: str) -> JSONResponse:
    """Refused (405): the credentials file is where credentials are kept."""
    del identifier
    return _managed_in_file()


# ---- auth and dashboard --------------------------------------------------------------------
@router.post(
    "/auth/validate",
    response_model=TokenValid,
    responses={401: {"model": TokenRefused, "description": "The token is not serve's"}},
)
def auth_validate(
    request: Request, body: JsonBody, settings: SettingsDep
) -> TokenValid | JSONResponse:
    """The GUI's token sign-in: `{valid: true, user}` for serve's API token (compared in
    constant time), or anything when serve has no credentials; 401 `{valid: false}`
    otherwise. Open to requests without the token: it says only whether this one works."""
    token = body.get("session_token", body.get("token"))
    if token is not None and not isinstance(token, str):
        raise ShapeError("session_token", "must be a string")
    auth = ApiAuth.from_settings(settings)
    if auth.allows(request.headers.get("authorization"), token or None):
        return {"valid": True, "user": gui.USER}
    refused: TokenRefused = {"valid": False, "detail": "the token is not valid"}
    return JSONResponse(refused, status_code=401)


@router.get("/dashboard/stats")
def dashboard_stats(engine: EngineDep) -> gui.DashboardBody:
    counts = compat.dashboard_counts(engine)
    recent = [shapes.execution_entry(r.row, r.version, r.progress) for r in counts.recent]
    return gui.dashboard_body(
        counts.by_status,
        counts.catalog_paths,
        counts.catalog_versions,
        counts.schedules,
        counts.schedules_enabled,
        recent,
    )
