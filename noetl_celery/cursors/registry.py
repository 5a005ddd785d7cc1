"""Cursor drivers by `kind`, imported lazily (psycopg only when a postgres cursor runs)."""

from __future__ import annotations

import importlib
import threading

from noetl_celery.constants import CURSOR_KINDS
from noetl_celery.cursors.base import CursorDriver
from noetl_celery.errors import ToolError

_MODULES = {"postgres": "noetl_celery.cursors.postgres", "sqlite": "noetl_celery.cursors.sqlite"}
_drivers: dict[str, CursorDriver] = {}
_lock = threading.Lock()


def get_driver(kind: str) -> CursorDriver:
    name = (kind or "").strip().lower()
    if name not in _MODULES:
        raise ToolError(
            f"unknown cursor kind {kind!r} (supported: {', '.join(sorted(CURSOR_KINDS))})"
        )
    with _lock:
        driver = _drivers.get(name)
        if driver is None:
            driver = _drivers[name] = importlib.import_module(_MODULES[name]).Driver()
        return driver
