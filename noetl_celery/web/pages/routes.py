"""The pages on the FastAPI app (`noetl-celery serve`)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["pages"], include_in_schema=False)
