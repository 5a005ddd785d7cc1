"""The names a template can use (docs/reference/dsl.md §3.2), built the same way on both sides:
the orchestrator (arc guards, `set`, `loop.in`) and the worker (tool fields, input).

Precedence, lowest first: variables, then step results by step name, then the engine's
own names (`execution_id`, `job`, `ctx`, `workload`, `iter`, `output`, `event`...). A
workload key called `execution_id` therefore cannot shadow the real execution id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from noetl_celery.templating.not_run import not_run
from noetl_celery.templating.result_view import result_ref, wrap


def build_context(
    variables: Mapping[str, Any],
    results: Mapping[str, Any],
    *,
    execution_id: str,
    extra: Mapping[str, Any] | None = None,
    steps: Iterable[str] = (),
) -> dict[str, Any]:
    """`steps`: the playbook's step names; those without a result (and not a variable)
    are bound to `StepNotRun` (templating.not_run), false in a test."""
    wrapped = {name: wrap(value, result_ref(execution_id, name)) for name, value in results.items()}
    context: dict[str, Any] = dict(variables)
    for name in steps:
        if name not in wrapped and name not in context:
            context[name] = not_run(name)
    context.update(wrapped)
    # `ctx` / `workload` are the flat variable map; step results are mirrored into it
    # (NoETL: `{{ ctx.<step> }}` works) but a variable of the same name wins there.
    flat = {**wrapped, **variables}
    context["ctx"] = flat
    context["workload"] = flat
    context["execution_id"] = execution_id
    context["job"] = {"uuid": execution_id, "execution_id": execution_id, "id": execution_id}
    if extra:
        context.update(extra)
    return context


def iteration_names(
    iterator: str, item: Any, index: int, total: int | None, extra_iter: Mapping[str, Any] | None
) -> dict[str, Any]:
    """`iter.<iterator>`, `iter._index/_first/_last`, top-level `<iterator>`, `loop_index`."""
    last = total is not None and index == total - 1
    scope: dict[str, Any] = {iterator: item, "_index": index, "_first": index == 0, "_last": last}
    if extra_iter:
        scope.update(extra_iter)
    return {
        "iter": scope,
        iterator: item,
        "loop_index": index,
        "loop": {"index": index, "first": index == 0, "length": total, "last": last},
    }
