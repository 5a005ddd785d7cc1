"""The patches `tasks.flower_pages` makes to Flower's templates find their anchors in the
installed Flower, and its pages' routes go before Flower's catch-all."""

from __future__ import annotations

import os
from typing import Any

import pytest
from flower import urls

from noetl_celery.tasks import flower_pages


@pytest.mark.parametrize(
    ("name", "marker"),
    [
        ("navbar.html", "noetl_executions"),
        ("task.html", "noetl_execution_id"),
        ("base.html", "flower_links.js"),
    ],
)
def test_each_patch_finds_its_anchor(name: str, marker: str) -> None:
    with open(os.path.join(urls.settings["template_path"], name), encoding="utf-8") as f:
        text = f.read()
    patched = flower_pages.PATCHES[name](text)
    assert marker not in text and marker in patched


def test_templates_compile() -> None:
    loader = flower_pages.FlowerTemplates(urls.settings["template_path"])
    for name in ("navbar.html", "task.html", "base.html", flower_pages.PAGE_TEMPLATE):
        assert loader.load(name) is not None


def test_nav_entries_sit_in_the_primary_navigation() -> None:
    with open(os.path.join(urls.settings["template_path"], "navbar.html"), encoding="utf-8") as f:
        patched = flower_pages.PATCHES["navbar.html"](f.read())
    primary = patched[: patched.find("</ul>")]
    assert "Broker" in primary and "Executions" in primary and "Schedules" in primary


def test_install_puts_routes_before_the_catch_all_once() -> None:
    handlers: list[Any] = list(urls.handlers)
    settings: dict[str, Any] = dict(urls.settings)
    engine: Any = object()
    flower_pages.install_pages(engine, handlers, settings)
    flower_pages.install_pages(engine, handlers, settings)
    names = [getattr(h, "name", None) for h in handlers]
    assert names.count("noetl_executions") == 1
    catch_all = next(i for i, h in enumerate(handlers) if isinstance(h, tuple) and h[0] == r".*")
    assert names.index("noetl_executions") < catch_all == len(handlers) - 1
    assert isinstance(settings["template_loader"], flower_pages.FlowerTemplates)
    assert "noetl_execution_id" in settings["ui_methods"]
    assert urls.settings.get("template_loader") is None  # the module's own left alone


@pytest.mark.parametrize(
    ("prefix", "base"), [(None, ""), ("", ""), ("/", ""), ("flower", "/flower"), ("/f/", "/f")]
)
def test_url_base(prefix: str | None, base: str) -> None:
    assert flower_pages.url_base(prefix) == base
