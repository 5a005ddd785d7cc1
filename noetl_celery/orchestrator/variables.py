"""Server-side `set:` (step level after `call.done`, arc level when the arc fires)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noetl_celery.models.scopes import split_set_key
from noetl_celery.templating import STRICT, Renderer


def apply_set(
    variables: dict[str, Any],
    mapping: Mapping[str, Any],
    context: Mapping[str, Any],
    where: str,
    iter_scope: dict[str, Any] | None = None,
    *,
    renderer: Renderer = STRICT,
) -> None:
    """Render every value against the same context, then assign.

    `ctx.`/`step.`/bare keys write the flat variable map. `iter.` keys write
    `iter_scope` when one is given (a loop iteration) and the flat map otherwise, which
    is where NoETL's server puts them.
    """
    rendered = [
        (split_set_key(key), renderer.value(value, context, f"{where}.{key}"))
        for key, value in mapping.items()
    ]
    for (scope, name), value in rendered:
        if scope == "iter" and iter_scope is not None:
            iter_scope[name] = value
        else:
            variables[name] = value
