"""Semantic checks of the document and its steps (what the pydantic models cannot see).

Everything here reads the raw YAML data, so it runs even when the models rejected the
document; a value of the wrong shape is skipped because the schema layer already reported it.
"""

from __future__ import annotations

from collections.abc import Mapping
from difflib import get_close_matches
from typing import Any

from noetl_celery.constants import API_VERSIONS
from noetl_celery.errors import ConfigurationError
from noetl_celery.models.deadlines import parse_deadline
from noetl_celery.models.durations import not_a_duration, to_seconds
from noetl_celery.models.keychain import (
    CLOUD_KINDS,
    KeychainEntry,
    entry_problems,
    unsupported_message,
)
from noetl_celery.models.notify import parse_playbook_notify
from noetl_celery.models.playbook import ON_ERROR_VALUES
from noetl_celery.models.schedule import parse_declared
from noetl_celery.models.validation.base import Collector, as_dict, as_list, names_list
from noetl_celery.models.validation.flow import check_arcs, check_loop, no_such_step
from noetl_celery.models.validation.tools import (
    ToolContext,
    check_pipeline,
    check_rate_limit,
    check_tool,
    iter_actions,
)
from noetl_celery.models.validation.values import check_set_keys, check_templates
from noetl_celery.models.yaml_positions import Path
from noetl_celery.routing import is_step_queue

_TOP_KEYS = frozenset(
    {"apiVersion", "kind", "metadata", "workload", "keychain", "workbook", "executor", "workflow"}
)
_STEP_KEYS = frozenset(
    {"step", "desc", "when", "tool", "input", "set", "loop", "next", "spec", "rate_limit"}
)
# Step keys NoETL's runtime model rejects outright: an error here as well.
_REJECTED_KEYS = {
    "args": "pass tool arguments with `input:`",
    "set_ctx": "use `set:` with `ctx.<name>` keys",
    "set_iter": "use `set:` with `iter.<name>` keys",
    "result": "read a step's result by its name (`{{ <step> }}`) or via `output` in `set`/arcs",
    "outcome": "read a step's result by its name (`{{ <step> }}`) or via `output` in `set`/arcs",
}
_CONDITION_KEYS = frozenset({"case", "type"})
_TOOL_FIELDS = frozenset(
    {"kind", "command", "commands", "query", "queries", "cmd", "cmds", "code", "url", "auth"}
)
_IGNORED_HINTS = {
    "output": "result storage options belong in `tool.output`",
    "vars": "use `set:` to store values or `input:` to pass them",
}
_STEP_ROOT: Path = ("workflow",)


def check_document(collector: Collector) -> None:
    data = as_dict(collector.data)
    _check_top_level(collector, data)
    steps = as_list(data.get("workflow"))
    names = _check_step_names(collector, steps)
    workbook = _check_workbook(collector, as_list(data.get("workbook")))
    for index, raw in enumerate(steps):
        if isinstance(raw, dict):
            _check_step(collector, (*_STEP_ROOT, index), raw, names, workbook)
    spec = as_dict(as_dict(data.get("executor")).get("spec"))
    for key in ("entry_step", "final_step"):
        target = spec.get(key)
        if isinstance(target, str) and target not in names:
            collector.error(("executor", "spec", key), no_such_step(f"`{key}`", target, names))


def _check_schedule(collector: Collector, data: Mapping[str, Any]) -> None:
    declared = as_dict(data.get("metadata")).get("schedule")
    try:
        parse_declared(declared)
    except ConfigurationError as exc:
        collector.error(("metadata", "schedule"), str(exc))


def _check_notify(collector: Collector, data: Mapping[str, Any]) -> None:
    """`metadata.notify` and `metadata.deadline` (models.notify, models.deadlines)."""
    metadata = as_dict(data.get("metadata"))
    try:
        parse_playbook_notify(metadata.get("notify"))
    except ConfigurationError as exc:
        collector.error(("metadata", "notify"), str(exc))
    if metadata.get("deadline") is None:
        return
    timezone = as_dict(metadata.get("schedule")).get("timezone")
    try:
        parse_deadline(metadata["deadline"], str(timezone or "UTC"))
    except ConfigurationError as exc:
        collector.error(("metadata", "deadline"), str(exc))


def _check_top_level(collector: Collector, data: Mapping[str, Any]) -> None:
    _check_schedule(collector, data)
    _check_notify(collector, data)
    version = data.get("apiVersion")
    if isinstance(version, str) and version not in API_VERSIONS:
        collector.error(
            ("apiVersion",),
            f"`apiVersion: {version}` is not supported; use "
            f"one of {names_list(sorted(API_VERSIONS))}",
        )
    for key in data:
        if key == "vars":
            collector.error(
                ("vars",),
                "root `vars` is not supported (NoETL rejects it too); "
                "put default inputs under `workload:`",
            )
        elif key not in _TOP_KEYS:
            collector.warning((key,), f"unknown top-level key `{key}` is ignored")
    _check_keychain(collector, data.get("keychain"))


def _check_keychain(collector: Collector, section: Any) -> None:
    """Malformed entries are errors; a cloud kind (secret manager, Google tokens) or a
    secret `provider` (gcp, aws, azure, vault, k8s) is a warning: the playbook
    registers, and an execution of it fails at start."""
    if not isinstance(section, list):
        return  # the schema layer reports a `keychain` that is not a list
    seen: set[str] = set()
    for index, raw in enumerate(section):
        path: Path = ("keychain", index)
        problems = entry_problems(index, raw)
        for key, message in problems:
            collector.error((*path, key) if key else path, message)
        if problems:
            continue
        name = str(raw["name"])
        if name in seen:
            collector.error(
                (*path, "name"), f"keychain entry '{name}' is declared twice; rename one"
            )
        seen.add(name)
        kind = str(raw.get("kind", raw.get("type")) or "")
        entry = KeychainEntry(name, kind, "global", dict(raw))
        if kind in CLOUD_KINDS or entry.provider is not None:
            key = "provider" if entry.provider is not None else "kind"
            collector.warning(
                (*path, key if key in raw else "type"),
                f"{unsupported_message(entry)}; an execution of this playbook fails at start",
            )


def _check_step_names(collector: Collector, steps: list[Any]) -> list[str]:
    """Step names in order (first definition wins); duplicates and reserved `:` reported."""
    first_line: dict[str, int] = {}
    for index, raw in enumerate(steps):
        name = as_dict(raw).get("step")
        if not isinstance(name, str):
            continue
        path = (*_STEP_ROOT, index, "step")
        if not name.strip():
            collector.error(path, "the step name is empty; give the step a unique `step:` name")
        if ":" in name:
            collector.error(
                path,
                f"step name `{name}` contains `:`, which is reserved "
                "(`<step>:task_sequence` names pipeline commands); rename it",
            )
        if name in first_line:
            collector.error(
                path,
                f"step name `{name}` is already used on line "
                f"{first_line[name]}; step names must be unique",
            )
        else:
            first_line[name] = collector.document.line_of(path)
    return list(first_line)


def _check_workbook(collector: Collector, entries: list[Any]) -> tuple[str, ...]:
    names: list[str] = []
    for index, raw in enumerate(entries):
        entry = as_dict(raw)
        name = entry.get("name")
        if isinstance(name, str):
            if name in names:
                collector.error(
                    ("workbook", index, "name"),
                    f"workbook entry `{name}` is defined twice; entry names must be unique",
                )
            names.append(name)
    for index, raw in enumerate(entries):
        entry = as_dict(raw)
        tool, path = entry.get("tool"), ("workbook", index, "tool")
        if isinstance(tool, dict):
            name = entry.get("name")
            label = name if isinstance(name, str) else f"workbook[{index}]"
            check_tool(collector, path, tool, ToolContext(label, False, tuple(names)))
            check_templates(collector, path, tool)
    return tuple(names)


def _check_step(
    collector: Collector,
    path: Path,
    raw: Mapping[str, Any],
    names: list[str],
    workbook: tuple[str, ...],
) -> None:
    name = raw.get("step") if isinstance(raw.get("step"), str) else None
    _check_step_keys(collector, path, raw)
    if raw.get("tool") is None:
        _check_toolless(collector, path, raw)
    else:
        _check_step_tool(collector, path, raw["tool"], name or _step_label(path), workbook)
        if not isinstance(raw.get("loop"), dict):
            _check_quarantine_outside_loop(collector, path, raw["tool"])
    check_set_keys(collector, (*path, "set"), raw.get("set"))
    check_arcs(collector, (*path, "next"), raw.get("next"), names)
    if isinstance(raw.get("loop"), dict):
        check_loop(collector, (*path, "loop"), raw["loop"])
    _check_step_timeout(collector, path, raw.get("spec"))
    _check_step_queue(collector, path, raw.get("spec"))
    _check_step_when(collector, path, raw)
    _check_step_on_error(collector, path, raw.get("spec"))
    if "rate_limit" in raw:
        check_rate_limit(collector, (*path, "rate_limit"), raw["rate_limit"])
    for key in ("when", "tool", "input", "set", "loop", "next", "spec", "rate_limit"):
        check_templates(collector, (*path, key), raw.get(key))


def _check_step_when(collector: Collector, path: Path, raw: Mapping[str, Any]) -> None:
    if "when" in raw and not isinstance(raw["when"], str | bool):
        collector.error(
            (*path, "when"),
            f"a step's `when` is a template or a boolean, not {type(raw['when']).__name__}",
        )


def _check_step_on_error(collector: Collector, path: Path, spec: Any) -> None:
    if not isinstance(spec, dict) or "on_error" not in spec:
        return
    value = spec["on_error"]
    if not isinstance(value, str) or value.strip().lower() not in ON_ERROR_VALUES:
        collector.error(
            (*path, "spec", "on_error"),
            f"`spec.on_error` is one of {', '.join(ON_ERROR_VALUES)}, not {value!r}",
        )


def _check_step_queue(collector: Collector, path: Path, spec: Any) -> None:
    if not isinstance(spec, dict) or "queue" not in spec:
        return
    value = spec["queue"]
    if not is_step_queue(value):
        collector.error(
            (*path, "spec", "queue"),
            "`spec.queue` is a queue name of letters, digits, - and _ (served by "
            f"`noetl-celery worker -Q NAME`), not {value!r}",
        )


def _check_step_timeout(collector: Collector, path: Path, spec: Any) -> None:
    if not isinstance(spec, dict) or "timeout" not in spec:
        return
    value = spec["timeout"]
    number = isinstance(value, int | float) and not isinstance(value, bool)
    seconds = to_seconds(value)
    if seconds is None and not number:
        collector.error((*path, "spec", "timeout"), not_a_duration(value))
    elif seconds is None or seconds <= 0:
        collector.error(
            (*path, "spec", "timeout"), f"a step timeout must be above 0 seconds, not {value!r}"
        )


def _step_label(path: Path) -> str:
    return f"workflow[{path[-1]}]"


def _check_step_keys(collector: Collector, path: Path, raw: Mapping[str, Any]) -> None:
    for key in raw:
        where = (*path, key)
        if key in _STEP_KEYS:
            continue
        if key in _REJECTED_KEYS:
            collector.error(
                where,
                f"step key `{key}` is not supported (NoETL rejects it too); " + _REJECTED_KEYS[key],
            )
        elif key in _CONDITION_KEYS:
            collector.error(
                where,
                f"step-level `{key}` is not supported: conditions go on "
                "the step's `when` (an enable guard), arcs (`next.arcs[].when`) "
                "and task policies (`tool.spec.policy.rules[].when`)",
            )
        elif key in _TOOL_FIELDS and raw.get("tool") is None and "kind" in raw:
            continue  # the missing tool's error says where they belong
        elif key in _TOOL_FIELDS:
            collector.warning(
                where,
                f"step-level `{key}` is ignored: it belongs inside "
                "`tool:` (indent it under the tool)",
            )
        elif raw.get("tool") is None and _near_tool(key):
            continue  # the missing tool's error names it
        else:
            hint = _IGNORED_HINTS.get(key, f"known keys: {names_list(sorted(_STEP_KEYS))}")
            collector.warning(where, f"unknown step key `{key}` is ignored; {hint}")


def _check_toolless(collector: Collector, path: Path, raw: Mapping[str, Any]) -> None:
    """A step without `tool` runs as `kind: noop` (NoETL's Python engine takes it as a
    transition target that runs nothing); an error only when a key says a tool was meant:
    a misspelling of `tool` or a tool field at step level."""
    typo = next((k for k in raw if k not in _STEP_KEYS and _near_tool(k)), None)
    if typo is not None:
        message = f"the step has no `tool`; `{typo}` looks like a misspelling of `tool`"
    elif "kind" in raw:
        message = "the step has no `tool`; indent `kind` and the tool's fields under `tool:`"
    else:
        return
    collector.error((*path, "tool"), message)


def _near_tool(key: Any) -> bool:
    return isinstance(key, str) and bool(get_close_matches(key.lower(), ["tool"], cutoff=0.7))


def _check_quarantine_outside_loop(collector: Collector, path: Path, tool: Any) -> None:
    """`do: quarantine` sets a loop item aside; a step without a loop has no item, and
    the rule fails the step as `do: fail` would."""
    tools = [((*path, "tool"), tool)] if isinstance(tool, dict) else []
    tools += [((*path, "tool", i), t) for i, t in enumerate(as_list(tool)) if isinstance(t, dict)]
    for task_path, task in tools:
        for then_path, then in iter_actions(task_path, task):
            if then.get("do") == "quarantine":
                collector.warning(
                    (*then_path, "do"),
                    "`do: quarantine` sets a loop item aside; this step has no `loop`, so "
                    "it fails the step as `do: fail` would",
                )


def _check_step_tool(
    collector: Collector, path: Path, tool: Any, label: str, workbook: tuple[str, ...]
) -> None:
    if isinstance(tool, dict):
        check_tool(collector, (*path, "tool"), tool, ToolContext(label, False, workbook))
        if tool.get("set"):
            collector.warning(
                (*path, "tool", "set"),
                "a tool's `set:` binds names for the tasks after it in a pipeline, and "
                "a single tool has none: it is ignored; use the step's `set:`",
            )
    elif isinstance(tool, list):
        if not tool:
            collector.error((*path, "tool"), "`tool` is an empty list; add at least one task")
        for index, task in enumerate(tool):
            if isinstance(task, dict):
                context = ToolContext(f"{label}.{task.get('name') or index}", True, workbook)
                check_tool(collector, (*path, "tool", index), task, context)
    check_pipeline(collector, path, label, tool)
