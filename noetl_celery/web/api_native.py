"""The native JSON API under `/api/v1` (see the package docstring)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from noetl_celery.web.deps import EngineDep

router = APIRouter(prefix="/api/v1", tags=["native"])


@router.get("/executions/{execution_id}")
def execution(execution_id: str, engine: EngineDep) -> dict[str, Any]:
    """One execution: its steps, loops with progress, errors, commands in flight."""
    return engine.status(execution_id)
