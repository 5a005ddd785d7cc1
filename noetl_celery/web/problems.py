"""Engine errors as HTTP answers: one status per kind of error, `{"detail": message}`
(what FastAPI and NoETL's servers answer; NoETL's CLI prints the body as it is), plus
`problems` for an invalid playbook. Messages are the engine's own one-line messages,
which never carry secrets (tools.redaction masks them where they are made)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from noetl_celery.engine.rerun import RerunError
from noetl_celery.errors import (
    CatalogNotFound,
    ConfigurationError,
    ExecutionNotFound,
    InputInvalid,
    NoetlError,
    PlaybookInvalid,
    ScheduleNotFound,
    StoreError,
)

# most specific first: the first match decides
STATUS_BY_ERROR: tuple[tuple[type[NoetlError], int], ...] = (
    (ExecutionNotFound, 404),
    (CatalogNotFound, 404),
    (ScheduleNotFound, 404),
    (PlaybookInvalid, 422),
    (InputInvalid, 422),
    (RerunError, 409),
    (StoreError, 503),
    (ConfigurationError, 500),
)


def status_for(exc: NoetlError) -> int:
    for kind, status in STATUS_BY_ERROR:
        if isinstance(exc, kind):
            return status
    return 400


def body_for(exc: NoetlError) -> dict[str, Any]:
    body: dict[str, Any] = {"detail": " ".join(str(exc).split()) or type(exc).__name__}
    if isinstance(exc, PlaybookInvalid):
        body["problems"] = [str(p) for p in exc.problems]
    return body


def install(app: FastAPI) -> None:
    async def handle(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, NoetlError)
        return JSONResponse(body_for(exc), status_code=status_for(exc))

    app.add_exception_handler(NoetlError, handle)
