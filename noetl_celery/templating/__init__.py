"""Jinja2 rendering shared by the orchestrator (guards, `set`) and the step runner."""

from noetl_celery.templating.render import (
    evaluate_condition,
    is_template,
    render_string,
    render_value,
    truthy,
)
from noetl_celery.templating.renderer import STRICT, Renderer, renderer_for
from noetl_celery.templating.result_view import ResultView, unwrap, wrap

__all__ = [
    "STRICT",
    "Renderer",
    "ResultView",
    "evaluate_condition",
    "is_template",
    "render_string",
    "render_value",
    "renderer_for",
    "truthy",
    "unwrap",
    "wrap",
]
