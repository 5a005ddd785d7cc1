"""`Renderer`: the rendering rules one caller uses.

- `strict` (the default): an undefined name or attribute fails with a message naming
  the template and where it sits (docs/design.md §7).
- `noetl`: NoETL's own behaviour, for playbooks that rely on it (`NOETL_TEMPLATE_MODE=
  noetl`): a template that fails to render is kept as its raw text, and on the worker
  (`lenient`) an undefined value renders as "" (its length is 0). Guards are false
  whenever they cannot be evaluated. This hides mistakes; it exists to run legacy
  playbooks unchanged, not as a way to write new ones.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from noetl_celery.errors import TemplateError
from noetl_celery.templating import render as _render

log = logging.getLogger("noetl_celery.templating")
Mode = Literal["strict", "noetl"]


@dataclass(frozen=True)
class Renderer:
    mode: Mode = "strict"
    lenient: bool = False  # NoETL's worker side (only with mode "noetl")

    @property
    def noetl(self) -> bool:
        return self.mode == "noetl"

    def string(self, source: str, context: Mapping[str, Any], where: str | None = None) -> Any:
        if not self.noetl:
            return _render.render_string(source, context, where)
        try:
            return _render.render_string(source, context, where, lenient=self.lenient)
        except TemplateError as exc:
            log.warning("NoETL template mode keeps the raw template: %s", exc)
            return source

    def value(self, value: Any, context: Mapping[str, Any], where: str | None = None) -> Any:
        return _render.render_value(value, context, where, string=self.string)

    def lazy_range(
        self, source: Any, context: Mapping[str, Any], where: str | None = None
    ) -> range | None:
        """`source`'s range, unbuilt, when it is just `{{ range(...) }}` (or `| list`);
        None otherwise, and when it fails to render (rendering it as a value then says
        why, by this renderer's rules)."""
        try:
            return _render.lazy_range(source, context, where, lenient=self.lenient)
        except TemplateError:
            return None

    def condition(
        self, when: str | bool | None, context: Mapping[str, Any], where: str | None = None
    ) -> bool:
        if not self.noetl:
            return _render.evaluate_condition(when, context, where)
        try:
            return _render.evaluate_condition(when, context, where, lenient=self.lenient)
        except TemplateError:
            return False  # NoETL: a guard that fails to render is false


STRICT = Renderer()


def renderer_for(mode: str, *, worker: bool) -> Renderer:
    if mode not in ("strict", "noetl"):
        raise ValueError(f"unknown template mode {mode!r}")
    return Renderer("noetl", lenient=worker) if mode == "noetl" else STRICT
