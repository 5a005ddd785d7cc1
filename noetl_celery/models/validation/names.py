"""Name checks: what templates read that nothing defines (docs/reference/dsl.md §3.2).

Every template of a step is parsed (`validation.refs`) and each name it reads is looked up
in what the playbook defines: workload keys, step names (their results), `set` keys, loop
iterators, input keys, pipeline task labels, and the engine's own names (`ctx`, `iter`,
`output`, `event`, ...). Severity follows what can change at run time:

- a bare name or `ctx.<name>` nothing defines is a *warning*: the execution payload may
  supply it (`--set`, `--payload` add keys the workload does not declare);
- `iter.<name>` in a loop step is an *error* when it is neither the iterator, nor one of
  `_index/_first/_last`, nor written by a `set: {iter.<name>: ...}`: the iteration scope
  is the engine's, no payload reaches it (item *fields* are data and never checked);
- `event.name` compared with a name no event has is an *error* (the arc can never fire);
  a NoETL event arcs never see, or one this kind of step never routes on, is a warning;
- credential aliases: see `validation.credentials`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from noetl_celery.constants import CALL_DONE, CALL_ERROR, EV_STEP_SKIPPED, LOOP_DONE
from noetl_celery.models.scopes import split_set_key
from noetl_celery.models.validation.base import (
    Collector,
    as_dict,
    as_list,
    did_you_mean,
    names_list,
)
from noetl_celery.models.validation.credentials import CredentialAliases, check_credentials
from noetl_celery.models.validation.refs import Reference, TemplateRefs, template_refs
from noetl_celery.models.validation.values import is_template, template_strings
from noetl_celery.models.yaml_positions import Path

__all__ = ["check_names"]

# Names the engine puts in some render context (templating.context, worker.runner,
# worker.pipeline, worker.claims). Where exactly varies; being permissive here keeps
# every warning true.
ENGINE_NAMES = frozenset(
    {
        "ctx",
        "workload",
        "iter",
        "output",
        "event",
        "error",
        "execution_id",
        "job",
        "loop",
        "loop_index",
        "results",
        "_task",
        "_prev",
        "_attempt",
        "frame",
        "now",
        "__frame_max_rows",
        "__worker_slot_id",
        "__cursor_frame",
        "__cursor_lane",
    }
)
# What `iter` holds besides the iterator (templating.context.iteration_names; the cursor
# row's position, worker.runner; NoETL's loop_event_id)
ITER_NAMES = frozenset(
    {"_index", "_first", "_last", "loop_event_id", "_worker_slot_id", "_frame_index",
     "_frame_row_index"}
)  # fmt: skip
ROUTING_EVENTS = (CALL_DONE, CALL_ERROR, LOOP_DONE)
# Events NoETL emits that never reach an arc's `when` (NoETL's engine.executor.common)
OTHER_EVENTS = frozenset(
    {
        "step.enter",
        "step.exit",
        EV_STEP_SKIPPED,  # seen by the arcs of a step with a `when` only
        "loop.item",
        "loop.stalled",
        "command.issued",
        "command.claimed",
        "command.started",
        "command.heartbeat",
        "command.completed",
        "command.failed",
        "playbook.initialized",
        "playbook.completed",
        "playbook.failed",
        "workflow.initialized",
        "workflow.completed",
        "workflow.failed",
        "execution.cancelled",
    }
)
# Names NoETL's render context has and noetl-celery's does not (docs/reference/dsl.md §3.2)
NOETL_ONLY = {
    "token": "the keychain's token function (`token('<entry>')` reads a `keychain` entry's "
    "token), and this playbook declares no `keychain`",
    "catalog_id": "NoETL's catalog id of the playbook, which noetl-celery does not provide "
    "(use `execution_id` or `job`)",
}
# A loop step's result (orchestrator.iterations.finish_loop), as templates read it
LOOP_RESULT = frozenset({"stats", "results", "_ref"})
# `quarantined` only when some items were (iterations.loop_stats)
LOOP_STATS = frozenset({"total", "success", "failed", "quarantined"})
_FALLBACK = frozenset({"data", "result"})  # templating.result_view: the result itself
# What older playbooks call the outcome of the step being routed (NoETL v1 names)
_OUTCOME_NAMES = frozenset({"result", "response"})
# `when`: the step-level enable guard, rendered by the orchestrator like an arc's `when`
_STEP_FIELDS = ("when", "tool", "input", "set", "loop", "next")


@dataclass
class _Defined:
    """Everything the playbook itself defines a name for."""

    steps: list[str] = field(default_factory=list)
    loop_steps: set[str] = field(default_factory=set)  # their result's shape is fixed
    variables: set[str] = field(default_factory=set)  # workload, `set`, iterators
    locals: set[str] = field(default_factory=set)  # input keys, task labels
    iter_keys: set[str] = field(default_factory=set)  # `set: {iter.<k>: ...}`

    def top_level(self) -> set[str]:
        return {*self.steps, *self.variables, *self.locals, *ENGINE_NAMES}


@dataclass(frozen=True)
class _Where:
    """The step a template belongs to, as far as its names are concerned."""

    iterator: str | None  # the step's loop iterator; None: not a loop step
    field: str  # the step key the template sits under (`tool`, `next`, ...)
    workbook: bool = False
    guarded: bool = False  # the step has a `when`: its arcs may see `step.skipped`


def check_names(collector: Collector, credentials: CredentialAliases | None = None) -> None:
    data = as_dict(collector.data)
    defined = _definitions(data)
    steps = as_list(data.get("workflow"))
    for index, raw in enumerate(steps):
        step = as_dict(raw)
        loop = as_dict(step.get("loop"))
        iterator = loop.get("iterator") if isinstance(loop.get("iterator"), str) else None
        for key in _STEP_FIELDS:
            loop_iterator = iterator if step.get("loop") is not None else None
            where = _Where(loop_iterator, key, guarded="when" in step)
            _check_value(collector, ("workflow", index, key), step.get(key), defined, where)
    for index, entry in enumerate(as_list(data.get("workbook"))):
        where = _Where(None, "tool", workbook=True)
        _check_value(
            collector, ("workbook", index, "tool"), as_dict(entry).get("tool"), defined, where
        )
    if credentials is not None:
        check_credentials(collector, data, credentials)


# ---- what the playbook defines ---------------------------------------------------------------
def _definitions(data: Mapping[str, Any]) -> _Defined:
    defined = _Defined()
    defined.variables.update(str(key) for key in as_dict(data.get("workload")))
    for entry in as_list(data.get("keychain")):  # NoETL's keychain: `keychain.<name>`
        defined.variables.add("token")  # `token('<entry>')` reads the keychain
        name = as_dict(entry).get("name")
        defined.variables.update(("keychain", name) if isinstance(name, str) else ("keychain",))
    for raw in as_list(data.get("workflow")):
        step = as_dict(raw)
        name = step.get("step")
        if isinstance(name, str):
            defined.steps.append(name)
            if step.get("loop") is not None:
                defined.loop_steps.add(name)
        iterator = as_dict(step.get("loop")).get("iterator")
        if isinstance(iterator, str):  # NoETL keeps the last item as a variable
            defined.variables.add(iterator)
        _add_sets(defined, step.get("set"))
        for arc in as_list(as_dict(step.get("next")).get("arcs")):
            _add_sets(defined, as_dict(arc).get("set"))
        defined.locals.update(str(key) for key in as_dict(step.get("input")))
        tool = step.get("tool")
        tools = tool if isinstance(tool, list) else [tool]
        for position, task in enumerate(tools):
            _add_tool(defined, as_dict(task))
            label = as_dict(task).get("name")
            defined.locals.add(label if isinstance(label, str) else f"task_{position}")
        if isinstance(name, str):
            defined.locals.add(f"{name}_task")
    for entry in as_list(data.get("workbook")):
        _add_tool(defined, as_dict(as_dict(entry).get("tool")))
    return defined


def _add_tool(defined: _Defined, tool: Mapping[str, Any]) -> None:
    defined.locals.update(str(key) for key in as_dict(tool.get("input")))
    # a pipeline task's `set:` binds names for the tasks after it
    for key in as_dict(tool.get("set")):
        if isinstance(key, str) and key.strip():
            scope, name = split_set_key(key)
            head = name.split(".", 1)[0]
            (defined.iter_keys if scope == "iter" else defined.locals).add(head)
    rules = as_list(as_dict(as_dict(tool.get("spec")).get("policy")).get("rules"))
    for rule in rules:
        rule, otherwise = as_dict(rule), as_dict(as_dict(rule).get("else"))
        # `else: {then: {set}}`, and NoETL's older `else: {do, set}` (a schema error, but
        # its writes still define names: one report per mistake)
        for action in (as_dict(rule.get("then")), as_dict(otherwise.get("then")), otherwise):
            _add_sets(defined, action.get("set"))


def _add_sets(defined: _Defined, mapping: Any) -> None:
    for key in as_dict(mapping):
        if not isinstance(key, str) or not key.strip():
            continue
        scope, name = split_set_key(key)
        head = name.split(".", 1)[0]
        (defined.iter_keys if scope == "iter" else defined.variables).add(head)


# ---- the references of one field --------------------------------------------------------------
def _check_value(
    collector: Collector, path: Path, value: Any, defined: _Defined, where: _Where
) -> None:
    known = defined.top_level()
    for text_path, text in template_strings(value, path):
        if not is_template(text):
            continue
        inner = text_path[len(path) :]
        if where.field == "tool" and _not_rendered(inner):
            continue
        if where.field == "next" and inner[2:3] not in (("when",), ("set",)):
            continue  # `next.spec`, `arcs[].spec`, `arcs[].step` are never rendered
        refs = template_refs(text)
        if refs is None:
            continue  # a syntax error, reported by check_templates
        for ref in _unique(refs.references):
            message, is_error = _reference_problem(ref, defined, known, where)
            if message is not None:
                line = collector.document.text_line(text_path, ref.line)
                add = collector.error if is_error else collector.warning
                add(text_path, message, line=line)
        for ref in set(refs.references):
            message = _loop_result_problem(ref.names, defined)
            if message is not None:
                collector.error(
                    text_path, message, line=collector.document.text_line(text_path, ref.line)
                )
        if where.field == "next" and inner[2:3] == ("when",):
            _check_events(collector, text_path, refs, where)


def _not_rendered(inner: Path) -> bool:
    """A tool's `output` and `spec` (but its policy rules) are read as written
    (worker.tool_call `_NOT_RENDERED`); `inner` is the path below `tool`."""
    if inner and isinstance(inner[0], int):
        inner = inner[1:]  # a pipeline task
    if not inner or inner[0] in ("kind", "name", "output"):
        return True
    return inner[0] == "spec" and inner[1:2] != ("policy",)


def _unique(references: Iterable[Reference]) -> Iterator[Reference]:
    seen: set[tuple[str, ...]] = set()
    for ref in references:
        if ref.names[:2] not in seen:
            seen.add(ref.names[:2])
            yield ref


def _reference_problem(
    ref: Reference, defined: _Defined, known: set[str], where: _Where
) -> tuple[str | None, bool]:
    head, key = ref.names[0], (ref.names[1] if len(ref.names) > 1 else None)
    if head == "iter" and key is not None and not where.workbook:
        return _iter_problem(key, defined, where)
    if head in ("ctx", "workload") and key is not None:
        names = {*defined.variables, *defined.steps}
        if key in names:
            return None, False
        return (
            f"`{head}.{key}`: no workload key, step or `set` key is called `{key}`; unless "
            f"the execution payload supplies it, rendering fails"
            f"{did_you_mean(key, names, prefix=head + '.')}",
            False,
        )
    if head in known:
        return None, False
    if head in NOETL_ONLY:
        return f"`{head}` is {NOETL_ONLY[head]}; rendering fails here", False
    hint = (
        "; a step's outcome is `output` in `set` and arcs (`output.data`), `{{ <step> }}` elsewhere"
        if head in _OUTCOME_NAMES
        else did_you_mean(head, known)
    )
    return (
        f"`{head}` is not defined in this playbook (no workload key, step, `set` key, loop "
        f"iterator or input is called so); unless the execution payload supplies it, "
        f"rendering fails{hint}",
        False,
    )


def _loop_result_problem(names: tuple[str, ...], defined: _Defined) -> str | None:
    """A field of a loop step's result that it never has: the engine makes that result
    (`{stats: {total, success, failed}, results: [...]}`, orchestrator.iterations), so a
    misspelt field fails every run that reads it. `data`/`result` read the result itself
    (templating.result_view); `_ref` is its reference."""
    step = names[0]
    if step not in defined.loop_steps or step in defined.variables or step in defined.locals:
        return None
    fields = list(names[1:])
    while fields and fields[0] in _FALLBACK:
        fields.pop(0)
    if not fields:
        return None
    shown = ".".join(names)
    if fields[0] not in LOOP_RESULT:
        return (
            f"`{shown}`: `{step}` is a loop step, and its result has `stats` and `results` "
            f"only{did_you_mean(fields[0], LOOP_RESULT, prefix=step + '.')}"
        )
    if fields[0] == "stats" and len(fields) > 1 and fields[1] not in LOOP_STATS:
        return (
            f"`{shown}`: a loop step's `stats` has {names_list(sorted(LOOP_STATS))}"
            f"{did_you_mean(fields[1], LOOP_STATS, prefix=step + '.stats.')}"
        )
    return None


def _iter_problem(key: str, defined: _Defined, where: _Where) -> tuple[str | None, bool]:
    if where.iterator is None:
        if key in defined.iter_keys:
            return None, False
        return (
            f"`iter.{key}`: this step has no `loop`, so `iter` holds only what a `set: "
            f"{{iter.<name>: ...}}` writes, and none writes `iter.{key}`",
            False,
        )
    if where.field not in ("tool", "input", "set"):
        return None, False  # `loop.in` and arcs render outside the iteration
    names = {where.iterator, *ITER_NAMES, *defined.iter_keys}
    if key in names:
        return None, False
    guess = did_you_mean(key, {where.iterator, *defined.iter_keys}, prefix="iter.")
    return (
        f"`iter.{key}` is not defined: this loop's iterator is `{where.iterator}` "
        f"(`iter.{where.iterator}`) and no `set` writes `iter.{key}`"
        f"{guess or f'; use `iter.{where.iterator}.{key}` for a field of the item'}",
        True,
    )


def _check_events(collector: Collector, path: Path, refs: TemplateRefs, where: _Where) -> None:
    loop_step = where.iterator is not None
    routed = (LOOP_DONE,) if loop_step else (CALL_DONE, CALL_ERROR)
    if where.guarded:
        routed = (*routed, EV_STEP_SKIPPED)
    for comparison in refs.events:
        value = comparison.value
        line = collector.document.text_line(path, comparison.line)
        if value in routed:
            continue
        if value in ROUTING_EVENTS:
            why = (
                "the arcs of a loop step are evaluated on `loop.done` only"
                if loop_step
                else "this step has no `loop`: its arcs see `call.done` and `call.error`"
            )
            collector.warning(
                path, f"`event.name` is compared with `{value}`, but {why}", line=line
            )
        elif value in OTHER_EVENTS:
            collector.warning(
                path,
                f"`event.name` is compared with `{value}`, an event arcs never see (they are "
                f"evaluated on {names_list(list(routed))}); this comparison is never true",
                line=line,
            )
        else:
            collector.error(
                path,
                f"`event.name` is compared with `{value}`, which no event is called; arcs "
                f"here see {names_list(list(routed))}{did_you_mean(value, ROUTING_EVENTS)}",
                line=line,
            )
