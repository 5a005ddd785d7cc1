"""Request values checked before they reach SQL (issue 30): one line naming the value and
what is wrong, a 422, never a driver error.

- Integers are bounded by the column they are compared with (`BigInt`, `Int4`, ...:
  Annotated aliases for query and path parameters; `BIGINT_MAX`/`INT_MAX` for values
  parsed by hand), so Postgres never sees a number past its type.
- Text (path and query parameters, form fields, every key and string of a JSON body)
  holding a NUL character or a lone surrogate is refused: Postgres text and JSONB
  cannot store either (models.payload_walk.string_problem says which).
- A JSON body is parsed once here with its nesting capped (`JSON_MAX_DEPTH`: a payload
  at its own limit inside a request's object), so a deep body is a 422 instead of a
  RecursionError.

`CheckedRoute` applies the checks to every route of a router before FastAPI reads the
request (its JSON parsing, then the handler); `load_json` is the parser the routes that
read their body by hand use.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, Final
from urllib.parse import parse_qsl

from fastapi import Path, Query, Request, Response
from fastapi.routing import APIRoute

from noetl_celery.constants import MAX_PAYLOAD_DEPTH
from noetl_celery.errors import InputInvalid, PayloadInvalid
from noetl_celery.models.inputs import PayloadLimits, check_payload
from noetl_celery.models.payload_walk import string_problem

BIGINT_MAX: Final = 2**63 - 1  # Postgres BIGINT: catalog_id, event_id, log_id, schedule_id
INT_MAX: Final = 2**31 - 1  # Postgres INTEGER: a catalog version, an epoch
# a request's own object around a payload at its depth limit (`{"payload": {...}}`)
JSON_MAX_DEPTH: Final = MAX_PAYLOAD_DEPTH + 2
# the body's size is the request guard's to bound: here only depth and the values count
_BODY_LIMITS = PayloadLimits(max_depth=JSON_MAX_DEPTH, max_bytes=sys.maxsize)

# query and path parameters compared with a column of that type
BigInt = Annotated[int, Query(ge=0, le=BIGINT_MAX)]
Int4 = Annotated[int, Query(ge=1, le=INT_MAX)]
BigIdPath = Annotated[int, Path(ge=1, le=BIGINT_MAX)]

_JSON_TYPES = ("application/json",)
_FORM_TYPE = "application/x-www-form-urlencoded"


def check_text(value: str, where: str) -> None:
    """Raise InputInvalid (`where: reason`) for text Postgres cannot store."""
    problem = string_problem(value)
    if problem is not None:
        raise InputInvalid(where, problem)


def check_int(value: int, where: str, *, low: int = 1, high: int = BIGINT_MAX) -> int:
    """`value` when `low <= value <= high`, else InputInvalid naming the range."""
    if not low <= value <= high:
        raise InputInvalid(where, f"must be an integer from {low} to {high}, not {value}")
    return value


def digits(value: str) -> int | None:
    """The integer an ASCII-digit string spells, None for anything else (`str.isdigit`
    also takes `²` and other digits `int()` refuses)."""
    text = value.strip()
    if not text or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def load_json(raw: bytes | str, where: str = "body") -> Any:
    """A JSON document, refused with one line when it is not JSON, nests deeper than
    `JSON_MAX_DEPTH` or holds text or numbers Postgres cannot store (NUL, lone
    surrogates, NaN)."""
    try:
        data = json.loads(raw)
    except RecursionError:
        raise InputInvalid(
            where, f"nested deeper than the limit of {JSON_MAX_DEPTH} levels"
        ) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise InputInvalid(where, f"not JSON: {exc}") from None
    check_json(data, where)
    return data


def check_json(data: Any, where: str = "body") -> None:
    """The depth and value checks of `load_json` on a parsed document."""
    if isinstance(data, str):
        check_text(data, where)
        return
    if not isinstance(data, dict | list):
        return
    try:
        check_payload(data if isinstance(data, dict) else {"": data}, _BODY_LIMITS, root=where)
    except PayloadInvalid as exc:
        # a list body is checked as the value of a key named "": no `[""]` in the path
        subject = exc.subject.replace(f'{where}[""]', where, 1)
        raise InputInvalid(subject, exc.reason) from None


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def check_request(request: Request) -> None:
    """Path and query parameters, form fields and a JSON body: InputInvalid for the first
    value that is too deep or holds what Postgres cannot store."""
    for name, value in request.path_params.items():
        if isinstance(value, str):
            check_text(value, f"path parameter '{name}'")
    for name, value in request.query_params.multi_items():
        check_text(value, f"query parameter '{name}'")
    kind = _media_type(request)
    if kind not in (*_JSON_TYPES, _FORM_TYPE) and not kind.endswith("+json"):
        return
    body = await request.body()
    if not body.strip():
        return
    if kind == _FORM_TYPE:
        for name, value in parse_qsl(body.decode("utf-8", "replace")):
            check_text(value, f"form field '{name}'")
        return
    load_json(body)


Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class CheckedRoute(APIRoute):
    """A route whose request values pass `check_request` before FastAPI parses them: a
    refusal is an InputInvalid, which the app answers (web.problems: 422, one line)."""

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            await check_request(request)
            return await handler(request)

        return checked
