"""Durations: a number of seconds, or NoETL's strings `500ms`, `30s`, `5m`, `2h`.

NoETL's Rust server types a step's `spec.timeout` as a string ("30s", "5m";
noetl/server `orchestrate-core/src/playbook.rs`, `StepSpec.timeout`), its older fields
as numbers of seconds. Every field here that takes seconds takes either, through
`parse_duration` (and the pydantic type `Seconds` built on it).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from noetl_celery.errors import PlaybookError

DURATION_HINT = "use a number of seconds or 500ms, 30s, 5m, 2h"
_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_PATTERN = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|sec|s|min|m|h)?", re.IGNORECASE)


class DurationInvalid(PlaybookError):
    """A value that is not a duration; the message names the field and the forms."""


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def not_a_duration(value: Any) -> str:
    """`'30x' is not a duration: use ...` (the field is named by the caller)."""
    return f"{value!r} is not a duration: {DURATION_HINT}"


def to_seconds(value: Any) -> float | None:
    """Seconds for a number or a duration string; None for anything else (booleans,
    negative or non-finite numbers and strings such as '30x')."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _PATTERN.fullmatch(value.strip())
        if match is None:
            return None
        number, unit = match.groups()
        seconds = float(number) * _UNITS[(unit or "s").lower()]
    else:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def format_duration(seconds: float) -> str:
    """`45s`, `2m01s`, `1h02m`: a duration as people read it, the same in the CLI's
    progress lines and on the pages (so both import it from here, below them). Not one
    of the forms `parse_duration` reads: `1h02m` is for reading only."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def parse_duration(value: Any, field: str) -> float:
    """Seconds, or `DurationInvalid` naming `field`:
    "spec.timeout: '30x' is not a duration: use a number of seconds or 500ms, 30s, 5m, 2h"."""
    seconds = to_seconds(value)
    if seconds is None:
        raise DurationInvalid(f"{field}: {not_a_duration(value)}")
    return seconds


def _coerce(value: Any) -> Any:
    """For pydantic: a duration string becomes seconds; other values go on to the
    field's own checks (numbers, bounds); a string that is no duration is refused."""
    if isinstance(value, str):
        seconds = to_seconds(value)
        if seconds is None:
            raise PydanticCustomError("duration", "{reason}", {"reason": not_a_duration(value)})
        return seconds
    return value


# a number of seconds written as a number or as a duration string
Seconds = Annotated[float, BeforeValidator(_coerce)]
OptionalSeconds = Annotated[float | None, BeforeValidator(_coerce)]


def _coerce_or_template(value: Any) -> Any:
    """As `_coerce`, but a template (`'{{ frame_lease_seconds }}'`) is kept as written:
    for fields NoETL renders and this engine only accepts (frame leases, heartbeats)."""
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        return value
    return _coerce(value)


# a duration, or a template kept as written (a field accepted for NoETL, not acted on)
OptionalSecondsOrTemplate = Annotated[float | str | None, BeforeValidator(_coerce_or_template)]
