"""`/metrics`: Prometheus text, read from the engine database on each scrape."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["metrics"])
