"""How the python tool fills the parameters of a user's `main` (NoETL's rules)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

_MISSING = object()


def _lookup(name: str, sources: tuple[Mapping[str, Any], ...]) -> Any:
    for source in sources:
        if name in source:
            return source[name]
    return _MISSING


def main_arguments(
    main: Callable[..., Any], inputs: Mapping[str, Any], context: Mapping[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments for `main`.

    Each parameter is looked up by name in the step input, then `context["input"]`, then
    the context itself; a parameter named `context` receives the whole context; `**kwargs`
    receives the input keys no named parameter took. A parameter found nowhere is left
    out, so its default applies (or Python reports the missing argument clearly).
    """
    try:
        signature = inspect.signature(main)
    except (TypeError, ValueError):  # builtins and C callables may have no signature
        return [], {}
    context_input = context.get("input")
    sources: tuple[Mapping[str, Any], ...] = (
        inputs,
        context_input if isinstance(context_input, Mapping) else {},
        context,
    )
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    taken: set[str] = set()
    accepts_rest = False
    positional_open = True  # positional-only values must form an unbroken prefix
    for param in signature.parameters.values():
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            accepts_rest = True
            continue
        value = context if param.name == "context" else _lookup(param.name, sources)
        if value is _MISSING:
            positional_open = positional_open and param.kind is not param.POSITIONAL_ONLY
            continue
        taken.add(param.name)
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            if positional_open:
                args.append(value)
        else:
            kwargs[param.name] = value
    if accepts_rest:
        for key, value in inputs.items():
            if key not in taken and isinstance(key, str) and key.isidentifier():
                kwargs[key] = value
    return args, kwargs
