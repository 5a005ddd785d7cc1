"""The routes NoETL's own CLI (5.3.x) and GUI call, under `/api` (the shapes are in
`shared/spec/noetl-server-api.md` and NoETL's server code)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api", tags=["noetl"])


@router.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}
