"""Running one tool: resolve workbook references, render input and fields, call it.

Rendering happens here, on the worker, against the command's context; a template error
becomes the tool's failure (kind `template_error`) with a message naming the step and
the template, so it takes the same road as any other step failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noetl_celery import tracing
from noetl_celery.errors import NoetlError, TemplateError, ToolError
from noetl_celery.models.playbook import Playbook, ToolSpec
from noetl_celery.models.script_source import SCRIPT_KINDS
from noetl_celery.passes.scripts import apply_script, script_text
from noetl_celery.templating import STRICT, Renderer
from noetl_celery.tools.base import ToolCall, ToolOutcome
from noetl_celery.tools.registry import get_tool
from noetl_celery.tools.script_fetch import ScriptFetchError
from noetl_celery.tools.services import ToolServices
from noetl_celery.worker.subplaybook import Children, Suspend, spawn_request, started

_NOT_RENDERED = frozenset({"kind", "name", "spec", "input", "output"})


def resolve_workbook(
    playbook: Playbook, tool: ToolSpec, in_pipeline: bool
) -> tuple[ToolSpec, dict[str, Any]]:
    """A `kind: workbook` tool runs the named workbook task's tool; returns that tool and
    the input defaults to merge under the caller's input."""
    if tool.kind != "workbook":
        return tool, {}
    extra = tool.model_extra or {}
    name = extra.get("task") if in_pipeline and extra.get("task") else tool.name
    task = playbook.workbook_task(str(name)) if name else None
    if task is None:
        raise ToolError(f"workbook task '{name}' is not defined in the playbook's workbook")
    return task.tool, dict(task.tool.input)


def run_tool(
    *,
    playbook: Playbook,
    tool: ToolSpec,
    context: Mapping[str, Any],
    step_input: Mapping[str, Any],
    services: ToolServices,
    execution_id: str,
    step: str,
    command_id: str,
    where: str,
    in_pipeline: bool,
    children: Children | None = None,
    spawn_key: str = "",
    renderer: Renderer = STRICT,
) -> ToolOutcome:
    """Run the tool; a waiting sub-playbook raises `Suspend` (see worker.subplaybook)."""
    try:
        target, defaults = resolve_workbook(playbook, tool, in_pipeline)
        raw_input = {**defaults, **tool.input, **step_input}
        if target.kind == "playbook":
            if children is None:
                raise ToolError("sub-playbooks cannot run here")
            request = spawn_request(target, context, where, spawn_key, raw_input, renderer)
            children.check(request)
            if request.wait:
                raise Suspend(request)
            return started(children.start_detached(request), request)
        implementation = get_tool(target.kind)
        rendered_input = renderer.value(raw_input, context, f"{where} input")
        if not isinstance(rendered_input, dict):
            rendered_input = {}
        field_context = {**context, **rendered_input}
        config: dict[str, Any] = {}
        for key, value in target.fields().items():
            if key in implementation.raw_fields or key in _NOT_RENDERED:
                config[key] = value
            else:
                config[key] = renderer.value(value, field_context, f"{where} tool.{key}")
        if target.kind in SCRIPT_KINDS and config.get("script") is not None:
            text = script_text(config["script"], playbook.scripts, services, where)
            config = apply_script(
                target.kind,
                config,
                text,
                lambda sql: renderer.value(sql, field_context, f"{where} tool.script"),
            )
        call = ToolCall(
            kind=target.kind,
            config=config,
            input=rendered_input,
            execution_id=execution_id,
            step=step,
            command_id=command_id,
            services=services,
            context=field_context,
        )
        if not tracing.enabled():
            return implementation.run(call)
        with tracing.span(f"tool {target.kind}", {"noetl.tool.kind": target.kind}):
            outcome = implementation.run(call)
            if outcome.error is not None:
                tracing.failed(f"{outcome.error.kind}: {outcome.error.message}")
            return outcome
    except ScriptFetchError as exc:
        redact = services.redactor.redact
        return ToolOutcome.failure(exc.kind, redact(exc.message), retryable=exc.retryable)
    except TemplateError as exc:
        return ToolOutcome.failure("template_error", str(exc))
    except NoetlError as exc:
        return ToolOutcome.failure("config_error", f"{where}: {exc}")
