"""Helpers the python tool puts into the globals of user code (NoETL's names)."""

from __future__ import annotations

import builtins
import datetime as dt
import io
import sys
from collections.abc import Mapping
from typing import Any

from noetl_celery import logcapture


def now_utc() -> dt.datetime:
    """The current time, timezone-aware UTC."""
    return dt.datetime.now(dt.UTC)


def format_iso8601(value: dt.datetime | dt.date | None = None) -> str:
    """ISO 8601 text of `value` (default: now, UTC)."""
    return (value if value is not None else now_utc()).isoformat()


def deep_merge(base: Any, override: Any) -> Any:
    """A new mapping: `override` merged into `base`, nested mappings merged recursively."""
    if not isinstance(base, Mapping) or not isinstance(override, Mapping):
        return override
    merged = dict(base)
    for key, value in override.items():
        merged[key] = deep_merge(merged[key], value) if key in merged else value
    return merged


def get_val(data: Any, path: str, default: Any = None) -> Any:
    """`data["a"]["b"][0]` for `path="a.b.0"`; `default` where the path breaks."""
    current = data
    for part in str(path).split(".") if path else []:
        if isinstance(current, Mapping):
            if part not in current:
                return default
            current = current[part]
        elif isinstance(current, list | tuple):
            try:
                current = current[int(part)]
            except (ValueError, IndexError):
                return default
        else:
            attr = getattr(current, part, _MISSING)
            if attr is _MISSING:
                return default
            current = attr
    return current


_MISSING = object()


def stderr_print(*args: Any, **kwargs: Any) -> None:
    """`print` for user code: stdout belongs to the CLI's JSON output, so use stderr.
    While a command runs, what goes to stderr is also kept in its log capture, and the
    echo is the redacted text (a step printing a known secret shows `***`)."""
    target: Any = kwargs.get("file")
    if target is None or target is sys.stdout or target is sys.__stdout__:
        target = kwargs["file"] = sys.stderr
    capture = logcapture.current_capture()
    to_stderr = target is sys.stderr or target is sys.__stderr__
    if capture is None or not to_stderr:
        builtins.print(*args, **kwargs)  # a file of the step's own is not our business
        return
    flush = bool(kwargs.pop("flush", False))
    buffer = io.StringIO()
    builtins.print(*args, **{**kwargs, "file": buffer})
    target.write(capture.write(buffer.getvalue()))
    if flush:
        target.flush()
