"""Request values of NoETL's routes (api_noetl, api_gui): a playbook's content as NoETL
sends it (base64 or text), catalog ids and versions within Postgres' integer ranges, an
execute body's workload, the document's `kind`. Each bad value is a `ShapeError`, answered
422 with its one-line message (web.problems). Pure: no I/O."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from noetl_celery.errors import InputInvalid
from noetl_celery.web.inputs import BIGINT_MAX, INT_MAX, digits


class ShapeError(InputInvalid):
    """A request value that cannot be used (answered 422 with the message: web.problems)."""


# ---- request values ------------------------------------------------------------------------
def decode_content(value: str) -> str:
    """The YAML of a register request: NoETL's CLI sends it base64-encoded, its GUI as
    text. Base64 that decodes to UTF-8 is taken decoded, anything else as it is (YAML
    text always holds characters base64 does not: spaces, colons, newlines in between)."""
    compact = "".join(value.split())
    if not compact:
        return value
    try:
        return base64.b64decode(compact, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        return value


def parse_version(value: Any) -> int | None:
    """A catalog version from a request: an int, its digits, or "latest"/empty (None)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "latest")):
        return None
    number = _integer(value)
    if number is None:
        raise ShapeError("version", f"must be an integer or 'latest', not {_shown(value)}")
    return _within(number, "version", INT_MAX)


def parse_catalog_id(value: Any) -> int | None:
    if value is None or value == "":
        return None
    number = _integer(value)
    if number is None:
        raise ShapeError("catalog_id", f"must be a catalog id (digits), not {_shown(value)}")
    return _within(number, "catalog_id", BIGINT_MAX)


def _integer(value: Any) -> int | None:
    """An int, or a string of ASCII digits, as an int; None for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return digits(value) if isinstance(value, str) else None


def _within(number: int, field: str, high: int) -> int:
    """`number` when it can be a row's id or version (1 to the column's maximum)."""
    if not 1 <= number <= high:
        raise ShapeError(field, f"must be from 1 to {high}, not {number}")
    return number


def _shown(value: Any) -> str:
    """A request value in a message: its repr, shortened to one short line."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def execute_workload(body: Mapping[str, Any]) -> dict[str, Any]:
    """The payload of an execute request: `payload` (NoETL's field name) overlaid with
    `workload` (the alias its CLI and GUI send)."""
    merged: dict[str, Any] = {}
    for key in ("payload", "workload"):
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ShapeError(key, f"must be a JSON object, not {type(value).__name__}")
        merged.update(value)
    return merged


def check_kind(value: Any, field: str) -> None:
    """Only playbooks exist here; NoETL's other resource kinds are refused by name."""
    if value is not None and str(value).lower() != "playbook":
        raise ShapeError(field, f"{value!r} is not supported: only playbooks can be used")
