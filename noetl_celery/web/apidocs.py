"""`/docs` (Swagger UI) and `/redoc` served from installed packages, never from a CDN.

FastAPI's own doc pages load their JavaScript from a public CDN (nothing shows on an
offline network, and a compromised CDN would run script on the authenticated origin) and
start it with an inline script, which the pages' content policy refuses (web.guard).
These pages load the same two front ends from the `fastapi-offline` package's copies,
started by a script file of ours; only their styles are looser than the rest of the
site (both front ends set inline styles, and ReDoc runs a worker from a blob).
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

from noetl_celery import __version__
from noetl_celery.web.pages import render

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)

OPENAPI_URL = "/openapi.json"
# name -> (package holding it, media type)
ASSETS: dict[str, tuple[str, str]] = {
    "swagger-ui-bundle.js": ("fastapi_offline", "text/javascript; charset=utf-8"),
    "swagger-ui.css": ("fastapi_offline", "text/css; charset=utf-8"),
    "redoc.standalone.js": ("fastapi_offline", "text/javascript; charset=utf-8"),
    "favicon.png": ("fastapi_offline", "image/png"),
    "swagger-init.js": ("noetl_celery.web", "text/javascript; charset=utf-8"),
}
DOCS_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)

SWAGGER_PAGE = f"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>noetl-celery {__version__} · API</title>
  <link rel="icon" href="/docs-static/favicon.png">
  <link rel="stylesheet" href="/docs-static/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui" data-openapi="{OPENAPI_URL}"></div>
  <script src="/docs-static/swagger-ui-bundle.js"></script>
  <script src="/docs-static/swagger-init.js"></script>
</body>
</html>
"""

REDOC_PAGE = f"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>noetl-celery {__version__} · API</title>
  <link rel="icon" href="/docs-static/favicon.png">
</head>
<body>
  <redoc spec-url="{OPENAPI_URL}"></redoc>
  <script src="/docs-static/redoc.standalone.js"></script>
</body>
</html>
"""


def _page(html: str) -> HTMLResponse:
    return HTMLResponse(html, headers={"Content-Security-Policy": DOCS_POLICY})


@router.get("/docs")
def swagger() -> HTMLResponse:
    return _page(SWAGGER_PAGE)


@router.get("/redoc")
def redoc() -> HTMLResponse:
    return _page(REDOC_PAGE)


def asset(name: str) -> tuple[bytes, str] | None:
    """(content, media type) of one of the docs' files, None for any other name."""
    found = ASSETS.get(name)
    if found is None:
        return None
    package, media = found
    folder = "static" if package == "fastapi_offline" else "docs_static"
    return resources.files(package).joinpath(folder, name).read_bytes(), media


@router.get("/docs-static/{name}", response_class=Response)
def docs_static(name: str) -> Response:
    found = asset(name)
    if found is None:
        message = f"no file {name[:100]!r} among the API docs' files"
        return HTMLResponse(render.error_page(404, message), status_code=404)
    content, media = found
    return Response(content, media_type=media, headers={"Cache-Control": "max-age=3600"})
