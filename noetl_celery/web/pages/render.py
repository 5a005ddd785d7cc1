"""The pages' one Jinja environment: templates shipped in the package, autoescaped."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
# what `/pages-static/<name>` serves (nothing else from the package directory)
STATIC_FILES: dict[str, str] = {
    "pages.css": "text/css; charset=utf-8",
    "pages.js": "text/javascript; charset=utf-8",
    "flower_links.js": "text/javascript; charset=utf-8",
}


@cache
def environment() -> Environment:
    return Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(["html"], default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(name: str, **context: Any) -> str:
    return environment().get_template(name).render(**context)


def layout(title: str, body: str, *, base: str, active: str) -> str:
    """A whole page for `serve`: its own navigation around `body` (Flower puts the same
    body inside its own navigation instead: tasks.flower_pages)."""
    return render("layout.html", title=title, body=Markup(body), base=base, active=active)


def static_file(name: str) -> tuple[bytes, str] | None:
    """(content, media type) of a shipped static file, None for any other name."""
    media = STATIC_FILES.get(name)
    if media is None:
        return None
    return (STATIC / name).read_bytes(), media


def error_page(status: int, message: str) -> str:
    """A whole page saying why a request was refused (web.guard, outside any route)."""
    body = render("error.html", base="", status=status, message=message)
    return layout("Error", body, base="", active="")
