"""Engine errors as HTTP answers: one status per kind of error, `{"detail": message}`
(what FastAPI and NoETL's servers answer; NoETL's CLI prints the body as it is), plus
`problems` for an invalid playbook. A start the broker could not take but whose execution
is recorded (BrokerUnavailable naming it) is 202 `{"execution_id", "status": "accepted",
"detail"}`: it will be published exactly once when the broker is back (engine.outbox).
Messages are the engine's own one-line messages, which never carry secrets
(tools.redaction masks them where they are made)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from noetl_celery.errors import (
    BrokerUnavailable,
    CatalogNotFound,
    ConfigurationError,
    CredentialNotFound,
    ExecutionNotFound,
    InputInvalid,
    NoetlError,
    PlaybookInvalid,
    ScheduleNotFound,
    StoreError,
)
from noetl_celery.models.keychain import KeychainInvalid
from noetl_celery.passes.rerun import RerunError

# most specific first: the first match decides
STATUS_BY_ERROR: tuple[tuple[type[NoetlError], int], ...] = (
    (ExecutionNotFound, 404),
    (CatalogNotFound, 404),
    (ScheduleNotFound, 404),
    (CredentialNotFound, 404),
    (PlaybookInvalid, 422),
    (KeychainInvalid, 422),  # a keychain entry of a kind that cannot work here
    (InputInvalid, 422),
    (RerunError, 409),
    (StoreError, 503),
    # a start whose execution is recorded (202, `accepted`) is answered by body_for;
    # without one, nothing was created: try again later
    (BrokerUnavailable, 503),
    (ConfigurationError, 500),
)


def status_for(exc: NoetlError) -> int:
    if isinstance(exc, BrokerUnavailable) and exc.execution_id is not None:
        return 202  # recorded, published exactly once when the broker is back
    for kind, status in STATUS_BY_ERROR:
        if isinstance(exc, kind):
            return status
    return 400


def body_for(exc: NoetlError) -> dict[str, Any]:
    body: dict[str, Any] = {"detail": " ".join(str(exc).split()) or type(exc).__name__}
    if isinstance(exc, BrokerUnavailable) and exc.execution_id is not None:
        return {"execution_id": exc.execution_id, "status": "accepted", **body}
    if isinstance(exc, PlaybookInvalid):
        body["problems"] = [str(p) for p in exc.problems]
    return body


# where invalid requests are answered with one line: the native API and NoETL's routes
# (NoETL's CLI prints the body as it is: one line reads better than FastAPI's list)
ONE_LINE_PREFIX = "/api/"


def validation_line(errors: Sequence[Any]) -> str:
    """FastAPI's list of request problems as one line naming the first: where (query
    parameter, body field) and what is wrong, plus how many more there are."""
    if not errors:
        return "invalid request"
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ())]
    where = "request"
    if loc and loc[0] in ("query", "path", "header"):
        where = f"{loc[0]} parameter '{'.'.join(loc[1:])}'"
    elif loc and loc[0] == "body":
        where = f"body field '{'.'.join(loc[1:])}'" if len(loc) > 1 else "body"
    message = str(first.get("msg") or "invalid").removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {message}{more}"


def install(app: FastAPI) -> None:
    async def handle(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, NoetlError)
        return JSONResponse(body_for(exc), status_code=status_for(exc))

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        if not request.url.path.startswith(ONE_LINE_PREFIX):
            return await request_validation_exception_handler(request, exc)
        return JSONResponse({"detail": validation_line(exc.errors())}, status_code=422)

    app.add_exception_handler(NoetlError, handle)
    app.add_exception_handler(RequestValidationError, invalid)
