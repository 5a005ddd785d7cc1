"""Checks of `tool` blocks: kinds, kind-specific fields, python code, pipelines and policies."""

from __future__ import annotations

import ast
import base64
import binascii
import difflib
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from noetl_celery.constants import TOOL_KINDS, UNSUPPORTED_NOETL_KINDS
from noetl_celery.models.durations import is_template, not_a_duration, to_seconds
from noetl_celery.models.policy import PREVIOUS_ALIASES
from noetl_celery.models.python_code import compile_step_code
from noetl_celery.models.rate_limit import rate_limit_problems
from noetl_celery.models.script_source import (
    UNSUPPORTED_TYPES,
    ScriptConfigError,
    has_template,
    parse_script,
)
from noetl_celery.models.validation.base import Collector, as_dict, as_list, names_list, nonblank
from noetl_celery.models.validation.values import check_set_keys, check_when
from noetl_celery.models.yaml_positions import Path

SQL_KEYS = (
    "command",
    "commands",
    "query",
    "queries",
    "cmd",
    "cmds",
    "command_b64",
    "commands_b64",
    "query_b64",
)
_DIRECT_DB_FIELDS = ("db_host", "db_port", "db_user", "db_password", "db_name", "db_conn_string")
_SUPPORTED = ", ".join(sorted(TOOL_KINDS))


@dataclass(frozen=True)
class ToolContext:
    label: str  # python compile file name, e.g. the step or task name
    in_pipeline: bool
    workbook: tuple[str, ...]  # names of the playbook's `workbook` entries


def check_tool(collector: Collector, path: Path, tool: dict[str, Any], ctx: ToolContext) -> None:
    """Kind, kind-specific requirements and policy rules of one tool (or pipeline task)."""
    check_rules(collector, path, tool)
    if "rate_limit" in tool:
        check_rate_limit(collector, (*path, "rate_limit"), tool["rate_limit"])
    timeout = tool.get("timeout")
    if timeout is not None and not is_template(timeout) and to_seconds(timeout) is None:
        collector.error((*path, "timeout"), not_a_duration(timeout))
    kind = tool.get("kind")
    if not isinstance(kind, str):
        return  # a missing / non-string kind is a schema error
    if kind in UNSUPPORTED_NOETL_KINDS:
        collector.warning(
            (*path, "kind"),
            f"`kind: {kind}` is a NoETL tool kind that noetl-celery does not run; the "
            "playbook runs, and fails when this step is reached",
        )
        return
    if kind not in TOOL_KINDS:
        collector.error((*path, "kind"), _unknown_kind(kind))
        return
    checker = _KIND_CHECKS.get(kind)
    if checker is not None:
        checker(collector, path, tool, ctx)


def check_rate_limit(collector: Collector, path: Path, raw: Any) -> None:
    """A tool's or step's `rate_limit` block (models.rate_limit)."""
    for field, message in rate_limit_problems(raw):
        collector.error((*path, field) if field is not None else path, message)


def _unknown_kind(kind: str) -> str:
    """A kind neither this engine nor NoETL knows: most likely a typo."""
    known = sorted(TOOL_KINDS | UNSUPPORTED_NOETL_KINDS)
    guess = difflib.get_close_matches(kind.strip().lower(), known, n=1)
    hint = f"did you mean `{guess[0]}`? " if guess else ""
    return f"`kind: {kind}` is not a tool kind; {hint}use one of: {_SUPPORTED}"


def _check_python(
    collector: Collector, path: Path, tool: Mapping[str, Any], ctx: ToolContext
) -> None:
    sources = [key for key in ("code", "code_b64", "code_base64") if nonblank(tool.get(key))]
    if tool.get("script") is not None:
        check_script(collector, path, tool, sources)
        return  # the code is elsewhere: `script` wins over inline code, as in NoETL
    if not sources:
        collector.error(
            (*path, "code"),
            "a python tool needs `code:` with the python source (or `script:` naming a file "
            "or URL)" + _under_spec(tool, "code"),
        )
    for key in sources:
        _check_python_source(collector, (*path, key), tool[key], ctx.label, key != "code")


def _check_python_source(
    collector: Collector, path: Path, source: Any, label: str, encoded: bool
) -> None:
    if not isinstance(source, str):
        collector.error(path, f"`{path[-1]}` must be a string of python code")
        return
    if encoded:
        try:
            source = base64.b64decode(source, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            collector.error(path, f"`{path[-1]}` is not valid base64-encoded UTF-8 text")
            return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            # a top-level `return` is NoETL's form: compiled as the tool runs it
            compile_step_code(
                source, f"<{label}>", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
            )
        except SyntaxError as exc:
            line = None if encoded else collector.document.text_line(path, exc.lineno or 1)
            collector.error(path, _syntax_message(exc), line=line)
        except ValueError as exc:  # e.g. NUL bytes in the source
            collector.error(path, f"python code cannot be compiled: {exc}")
    for warning in caught:
        line = None if encoded else collector.document.text_line(path, warning.lineno)
        collector.warning(path, f"python code, line {warning.lineno}: {warning.message}", line=line)


def _syntax_message(exc: SyntaxError) -> str:
    return f"python code does not compile: {exc.msg} (line {exc.lineno} of the code)"


def _check_http(
    collector: Collector, path: Path, tool: Mapping[str, Any], ctx: ToolContext
) -> None:
    if not (nonblank(tool.get("url")) or nonblank(tool.get("endpoint"))):
        collector.error(
            (*path, "url"),
            "an http tool needs `url:` (the address to call)" + _under_spec(tool, "url"),
        )


def _under_spec(tool: Mapping[str, Any], field: str) -> str:
    """A hint when the missing field sits under `tool.spec:` (the "v10 canonical" form
    of some NoETL example playbooks): NoETL's Rust tools read `code`, `url` … on the tool
    itself and keep `spec` as an unread extra, so those playbooks fail there too."""
    spec = tool.get("spec")
    if isinstance(spec, Mapping) and field in spec:
        return (
            f"; this tool has `{field}` under `spec:`, which neither engine reads: "
            f"move `{field}` (and the other tool fields) up to `tool.{field}`"
        )
    return ""


def _check_postgres(
    collector: Collector, path: Path, tool: Mapping[str, Any], ctx: ToolContext
) -> None:
    if not nonblank(tool.get("auth")):  # legacy `credential:` was renamed (models.legacy)
        collector.error((*path, "auth"), "a postgres tool needs `auth: <credential name>`")
    for key in _DIRECT_DB_FIELDS:
        if key in tool:
            collector.error(
                (*path, key),
                f"`{key}` is not allowed; put connection details in a credential and "
                "reference it with `auth:`",
            )
    _require_sql(collector, path, tool, "postgres")


def _check_duckdb(
    collector: Collector, path: Path, tool: Mapping[str, Any], ctx: ToolContext
) -> None:
    _require_sql(collector, path, tool, "duckdb")


def _require_sql(collector: Collector, path: Path, tool: Mapping[str, Any], kind: str) -> None:
    given = [key for key in SQL_KEYS if nonblank(tool.get(key))]
    if tool.get("script") is not None:
        check_script(collector, path, tool, given)
        return
    if given:
        return
    message = (
        f"no SQL command provided: a {kind} tool needs SQL in `command:` (or `query`, "
        "`commands`, `queries`, or `script:` naming a file or URL)"
    )
    collector.error((*path, "command"), message)


def check_script(
    collector: Collector, path: Path, tool: Mapping[str, Any], inline: list[str]
) -> None:
    """The `script` mapping's shape; a gcs/s3 source only warns (it fails when it runs,
    so a playbook with an unused cloud step still runs its other steps)."""
    raw = tool["script"]
    for key in inline:
        collector.warning(
            (*path, key), f"`{key}` is ignored: `script` takes priority over inline code"
        )
    uri = raw.get("uri") if isinstance(raw, dict) else raw
    source = raw.get("source") if isinstance(raw, dict) else None
    declared = source.get("type") if isinstance(source, dict) else None
    if (has_template(uri) and not declared) or has_template(declared):
        return  # the source type is known once rendered, on the worker
    try:
        found = parse_script(raw)
    except ScriptConfigError as exc:
        suffix = tuple(exc.field.split(".")) if exc.field else ()
        collector.error((*path, "script", *suffix), str(exc))
        return
    if found.type in UNSUPPORTED_TYPES:
        collector.warning(
            (*path, "script", "source"),
            f"script source '{found.type}' is not supported by noetl-celery; the step fails "
            "when it runs (use a file or an http(s) URL)",
        )


def _check_workbook(
    collector: Collector, path: Path, tool: Mapping[str, Any], ctx: ToolContext
) -> None:
    key = "task" if ctx.in_pipeline and "task" in tool else "name"
    ref = tool.get(key)
    if not isinstance(ref, str) or not ref.strip():
        wanted = "`task: <workbook entry>` (or `name:`)" if ctx.in_pipeline else "`name:`"
        collector.error((*path, key), f"a workbook tool needs {wanted} naming a `workbook:` entry")
    elif ref not in ctx.workbook:
        known = names_list(list(ctx.workbook)) if ctx.workbook else "none: add a `workbook:` list"
        collector.error((*path, key), f"no `workbook` entry is named `{ref}`; entries: {known}")


def _check_playbook(
    collector: Collector, path: Path, tool: Mapping[str, Any], ctx: ToolContext
) -> None:
    if nonblank(tool.get("path")):
        return
    message = "a playbook tool needs `path:` (the catalog path to run)"
    if path[0] == "workbook" and ctx.label not in _workbook_calls(collector.data):
        # an entry no step calls never runs (NoETL registers such playbooks; its regression
        # suite has one): a step that did call it would fail there
        collector.warning((*path, "path"), f"{message}; no step calls this entry yet")
        return
    collector.error((*path, "path"), message)


def _workbook_calls(data: Any) -> set[str]:
    """Names of the workbook entries the workflow's tools call (`kind: workbook`)."""
    names: set[str] = set()
    for step in as_list(as_dict(data).get("workflow")):
        tool = as_dict(step).get("tool")
        for task in as_list(tool) if isinstance(tool, list) else [tool]:
            task = as_dict(task)
            if task.get("kind") == "workbook":
                names.update(str(task.get(key)) for key in ("name", "task") if key in task)
    return names


def _check_artifact(
    collector: Collector, path: Path, tool: Mapping[str, Any], ctx: ToolContext
) -> None:
    """`kind: artifact` (tools.artifact_tool): `action: get` of `input.result_ref`."""
    action = tool.get("action", "get")
    if not (isinstance(action, str) and action.strip().lower() == "get"):
        collector.error(
            (*path, "action"),
            f"`action: {action}` is not supported; an artifact tool only does `get` (a "
            "step's result is stored by returning it)",
        )
    # `input.result_ref` may come from the step's own `input:`: checked when it runs


_KIND_CHECKS: dict[str, Callable[[Collector, Path, dict[str, Any], ToolContext], None]] = {
    "artifact": _check_artifact,
    "python": _check_python,
    "http": _check_http,
    "postgres": _check_postgres,
    "duckdb": _check_duckdb,
    "workbook": _check_workbook,
    "playbook": _check_playbook,
}


def iter_actions(path: Path, tool: Mapping[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The `then` mapping of every policy rule of a tool, `else` rules included."""
    rules_path = (*path, "spec", "policy", "rules")
    rules = as_list(as_dict(as_dict(tool.get("spec")).get("policy")).get("rules"))
    for index, rule in enumerate(rules):
        rule = as_dict(rule)
        if "else" in rule:
            yield (*rules_path, index, "else", "then"), as_dict(as_dict(rule["else"]).get("then"))
        else:
            yield (*rules_path, index, "then"), as_dict(rule.get("then"))


def check_rules(collector: Collector, path: Path, tool: Mapping[str, Any]) -> None:
    rules = as_list(as_dict(as_dict(tool.get("spec")).get("policy")).get("rules"))
    for index, rule in enumerate(rules):
        if isinstance(rule, dict) and "when" in rule:
            check_when(collector, (*path, "spec", "policy", "rules", index, "when"), rule["when"])
    for then_path, then in iter_actions(path, tool):
        check_set_keys(collector, (*then_path, "set"), then.get("set"))


def check_pipeline(collector: Collector, step_path: Path, step: str, tool: Any) -> None:
    """Unique task labels; `jump` targets must be labels of the same pipeline."""
    tasks: list[tuple[Path, dict[str, Any]]]
    if isinstance(tool, dict):  # a single tool with rules runs as a one-task pipeline
        tasks, labels = [((*step_path, "tool"), tool)], [f"{step}_task"]
    else:
        tasks, labels = [], []
        for index, task in enumerate(as_list(tool)):
            if not isinstance(task, dict):
                continue
            task_path = (*step_path, "tool", index)
            name = task.get("name")
            label = name if isinstance(name, str) and name else f"task_{index}"
            if label in labels:
                collector.error(
                    (*task_path, "name"),
                    f"task label `{label}` is used twice in this pipeline; give every task "
                    "a unique `name:`",
                )
            tasks.append((task_path, task))
            labels.append(label)
    for task_path, task in tasks:
        for then_path, then in iter_actions(task_path, task):
            target = then.get("to")
            if then.get("do") != "jump" or not isinstance(target, str) or not target:
                continue  # a jump without `to` is a schema error
            if target not in labels and target not in PREVIOUS_ALIASES:
                collector.error(
                    (*then_path, "to"),
                    f"`jump` target `{target}` is not a task of this pipeline; use one of "
                    f"{names_list(list(dict.fromkeys(labels)))} or `previous`",
                )
