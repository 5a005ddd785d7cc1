"""A pipeline (task sequence) runs start to finish on one worker (docs/reference/dsl.md §1.4, §5.1).

After every task the task's policy rules are evaluated in order against its `output`;
the first match (or the `else` rule) decides: `continue`, `retry` (attempts count total
runs), `jump` to a label, `break`, or `fail`. Without a matching rule a successful task
continues and a failed one fails the pipeline. `set` in a rule writes `iter.*` into the
iteration scope and `ctx.*` into the pipeline's ctx, returned to the orchestrator.

A task's own `set:` (NoETL's forward-only binding, tools' task_sequence since 92716a5)
is rendered after the task runs, with `output` its result (a mapping also reachable
as `output.data`; after a failure, its `{status, data, error}` envelope, so a rule that
continues past the failure passes it on), before its rules: bare and dotted names are
bound for the tasks after it in this pipeline only (`a.b` nests), `iter.*` and `ctx.*`
keys write the iteration scope and the pipeline's ctx as a rule's `set` does. A task's
`input:` is rendered in that context, so it reads the names bound before it.

A task that waits for a sub-playbook suspends the pipeline: its whole run state is
returned as a continuation (plain JSON) and the pipeline resumes from it, with the
child's outcome as that task's outcome, when the command is issued again.

A retry that must wait longer than `PipelineLimits.park_after` seconds (a long backoff,
an HTTP `Retry-After`) parks the pipeline the same way instead of sleeping in the
worker's slot (docs/design.md §2.7): `Parked` carries the run state, with the waiting task's
attempt already counted, and the wait; the command resumes at that task when it is due.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypedDict

from noetl_celery import tracing
from noetl_celery.constants import (
    PIPELINE_STATUS_BREAK,
    PIPELINE_STATUS_FAILED,
    PIPELINE_STATUS_QUARANTINED,
)
from noetl_celery.errors import NoetlError, UndefinedVariable
from noetl_celery.models.outcome import (
    Detail,
    ErrorKind,
    Outcome,
    OutcomeMeta,
    StepError,
    output_view,
)
from noetl_celery.models.playbook import ToolSpec
from noetl_celery.models.policy import FAIL_WITHOUT_THEN, PREVIOUS_ALIASES, Then
from noetl_celery.models.scopes import split_set_key
from noetl_celery.templating import STRICT, Renderer
from noetl_celery.tools.base import ToolOutcome
from noetl_celery.worker.subplaybook import Suspend, Suspended, child_outcome
from noetl_celery.worker.throttle import Throttled

log = logging.getLogger("noetl_celery.worker")

# runs one task: (label, tool, context, spawn key) -> outcome (or raises Suspend)
TaskRunner = Callable[[str, ToolSpec, Mapping[str, Any], str], ToolOutcome]
# asked before every task: None to go on, or (error kind, message) to stop there
StopCheck = Callable[[], tuple[ErrorKind, str] | None]


@dataclass
class PipelineLimits:
    max_jumps: int = 100_000
    max_retry_delay: float = 300.0
    sleep: Callable[[float], None] = time.sleep
    renderer: Renderer = STRICT
    # a retry delay above this many seconds parks the command instead of sleeping in
    # its slot (None: always sleep, e.g. where there is nothing to park in)
    park_after: float | None = None
    # whether a run state may be stored as it is: a parked continuation is kept in
    # Postgres with the command's keychain values masked, so one that holds such a value
    # (a `set` that copied a token into ctx) would resume with `***` in its place; it
    # sleeps in its slot instead
    storable: Callable[[dict[str, Any]], bool] = lambda _state: True


@dataclass(frozen=True)
class Parked:
    """A pipeline that waits `delay` seconds before retrying a task: what to save (the
    run state, its `index` at the waiting task) and when to go on."""

    continuation: dict[str, Any]
    delay: float
    task: str
    # a keyed rate_limit's wait (worker.throttle), not a retry's: the keys whose send
    # slot is booked for the resumed run (None: a retry delay)
    booked: dict[str, list[float]] | None = None
    throttled: str | None = None  # the key it waits for
    # it waits for that key's send slot (per_second), not a run slot (worker.throttle)
    turn: bool = False
    # that key's rate had settled when the slot was booked (worker.parking.releases)
    settled: bool = True


@dataclass(frozen=True)
class _Wait:
    """`_act`'s answer for a retry to be parked rather than slept through."""

    delay: float


class TaskRecord(TypedDict):
    """A task's outcome as a pipeline's run state keeps it (JSON: the continuation)."""

    status: str
    data: Any
    error: dict[str, Any] | None  # models.outcome.StepError.to_json
    detail: Detail


@dataclass
class RunState:
    """Everything a pipeline needs to continue; JSON-serialisable (it is the
    continuation of a waiting command)."""

    index: int = 0
    results: dict[str, Any] = field(default_factory=dict)
    ctx: dict[str, Any] = field(default_factory=dict)
    iter: dict[str, Any] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    bound: dict[str, Any] = field(default_factory=dict)  # names tasks' `set:` bound
    prev: Any = None
    runs: int = 0
    jumps: int = 0
    spawns: int = 0
    last_label: str | None = None
    last: TaskRecord | None = None  # the last task's outcome

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunState:
        return cls(**dict(data))


# a step's `spec.on_error: retry` (NoETL server StepSpec.on_error): a failed task no rule
# matched is retried with the defaults of NoETL's `do: retry` (tools' task_sequence
# parse_control_action: 3 attempts in all, backoff none, 1 s), then fails the step
ON_ERROR_RETRY = Then(do="retry", attempts=3, backoff="none", delay=1.0, max_delay=None)


def task_failed(outcome: ToolOutcome) -> bool:
    """Inside a pipeline only `status: error` in a result counts as an error (NoETL)."""
    if not outcome.ok:
        return True
    status = outcome.data.get("status") if isinstance(outcome.data, dict) else None
    return isinstance(status, str) and status.strip().lower() == "error"


def _as_error(outcome: ToolOutcome) -> ToolOutcome:
    if not outcome.ok:
        return outcome
    data = outcome.data if isinstance(outcome.data, dict) else {}
    message = data.get("message") or data.get("error") or "task result has status 'error'"
    return ToolOutcome.failure("result_error", str(message), data=outcome.data)


def _retry_delay(then: Then, retry_number: int, outcome: ToolOutcome, cap: float) -> float:
    delay = then.retry_delay(retry_number)
    retry_after = outcome.error.retry_after if outcome.error is not None else None
    if retry_after is not None and retry_after > delay:
        delay = float(retry_after)  # the server said how long to back off: honour it
    return min(delay, cap)


def run_pipeline(
    step: str,
    tasks: list[tuple[str, ToolSpec]],
    base: Mapping[str, Any],
    iter_scope: Mapping[str, Any] | None,
    run_task: TaskRunner,
    limits: PipelineLimits,
    resume: Mapping[str, Any] | None = None,
    stop: StopCheck | None = None,
    on_error: Then | None = None,
) -> Outcome | Suspended | Parked:
    """Run the tasks; return the step's outcome (see models.outcome), `Suspended` or
    `Parked`.

    `resume` is `{"continuation": RunState, "child": <child summary>}` of a command that
    waited for a sub-playbook, or `{"continuation": RunState, "parked": {...}}` of one
    that waited out a retry delay (no child: the waiting task simply runs again).

    `on_error`: what a failed task no rule matched does instead of failing the pipeline
    (the step's `spec.on_error: retry` is `ON_ERROR_RETRY`)."""
    labels = [label for label, _ in tasks]
    run, child = _start(resume, iter_scope)
    status: str = "ok"
    failure: StepError | None = None
    base_ctx = base.get("ctx") or {}
    while run.index < len(tasks):
        reason = stop() if stop is not None else None
        if reason is not None:  # cancelled, taken over, or past the step's deadline
            status, failure = PIPELINE_STATUS_FAILED, StepError(*reason)
            break
        label, tool = tasks[run.index]
        attempt = run.attempts.get(label, 1)
        context = _task_context(base, base_ctx, run, label, attempt)
        if child is not None:
            outcome, child = child_outcome(child), None
        else:
            try:
                outcome = run_task(label, tool, context, f"{label}#{run.spawns + 1}")
            except Suspend as suspend:
                run.spawns += 1
                return Suspended(run.to_json(), suspend.request)
            except Throttled as wait:  # the task's rate_limit turn is later: park until it
                if limits.storable(run.to_json()):
                    state = run.to_json()
                    return Parked(
                        state, wait.delay, label, wait.booked, wait.key, wait.turn, wait.settled
                    )
                limits.sleep(wait.delay)  # its turn stays booked for the task's next run
                continue
        outcome = _record(run, label, outcome)
        output = _output(outcome, attempt)
        rule_context = {**context, "output": output, "error": output["error"]}
        try:
            if tool.set:  # after a failure too (NoETL's task_sequence), `output` its envelope
                where_bind = f"step '{step}' task '{label}' set"
                bound = outcome.data if outcome.ok else output
                _bind(tool.set, context, bound, run, where_bind, limits.renderer, outcome.ok)
            then = _match(step, label, tool, rule_context, limits.renderer)
            if then is None and not outcome.ok:
                then = on_error
            if then is not None and then.set:
                where_set = f"step '{step}' task '{label}' set"
                _apply_set(then.set, rule_context, run, where_set, limits.renderer)
        except NoetlError as exc:
            status, failure = PIPELINE_STATUS_FAILED, StepError("template_error", str(exc))
            break
        stopped = _act(step, labels, run, attempt, outcome, then, limits)
        if isinstance(stopped, _Wait):
            return Parked(run.to_json(), stopped.delay, label)
        if stopped is not None:
            status, failure = stopped
            break
    return _finish(run, status, failure, multi=len(tasks) > 1)


def _start(
    resume: Mapping[str, Any] | None, iter_scope: Mapping[str, Any] | None
) -> tuple[RunState, Mapping[str, Any] | None]:
    """The run state to go on from, and the child's summary a resumed task gets as outcome."""
    if resume is not None:
        return RunState.from_json(resume["continuation"]), resume.get("child")
    return RunState(iter=dict(iter_scope or {})), None


def _task_context(
    base: Mapping[str, Any],
    base_ctx: Mapping[str, Any],
    run: RunState,
    label: str,
    attempt: int,
) -> dict[str, Any]:
    return {
        **base,
        **run.results,
        **run.bound,
        "ctx": {**base_ctx, **run.ctx},
        "iter": run.iter,
        "results": run.results,
        "_task": label,
        "_prev": run.prev,
        "_attempt": attempt,
    }


def _record(run: RunState, label: str, outcome: ToolOutcome) -> ToolOutcome:
    """Count the run and keep the task's outcome (an `status: error` result as an error)."""
    run.runs += 1
    if task_failed(outcome):
        outcome = _as_error(outcome)
    run.results[label], run.last_label = outcome.data, label
    run.last = {
        "status": outcome.status,
        "data": outcome.data,
        "error": outcome.error.to_json() if outcome.error is not None else None,
        "detail": outcome.detail,
    }
    if outcome.ok:
        run.prev = outcome.data
    return outcome


def _output(outcome: ToolOutcome, attempt: int) -> dict[str, Any]:
    task = Outcome(
        outcome.status,
        outcome.data,
        outcome.error,
        detail=outcome.detail,
        meta={"attempt": attempt},
    )
    return output_view(task, step_level=False)


def _act(
    step: str,
    labels: list[str],
    run: RunState,
    attempt: int,
    outcome: ToolOutcome,
    then: Then | None,
    limits: PipelineLimits,
) -> tuple[str, StepError | None] | _Wait | None:
    """Carry out the matched rule's action on `run`; None to go on, `_Wait` to park before
    the retry, or the pipeline's final (status, failure)."""
    label = labels[run.index]
    action = then.do if then is not None else ("continue" if outcome.ok else "fail")
    if action == "continue":
        run.attempts.pop(label, None)
        run.index += 1
        return None
    if action == "retry":
        assert then is not None
        if attempt >= then.attempts:
            return PIPELINE_STATUS_FAILED, _exhausted(outcome, attempt)
        delay = _retry_delay(then, attempt, outcome, limits.max_retry_delay)
        run.attempts[label] = attempt + 1  # counted before parking: max attempts still bound it
        parks = limits.park_after is not None and delay > limits.park_after
        _trace_retry(label, attempt, then.attempts, delay, outcome, parks)
        if parks:
            if limits.storable(run.to_json()):
                return _Wait(delay)
            log.info(
                "step '%s' task '%s': not parked for its %.3gs retry delay: its state "
                "holds a keychain value or a password, which is never stored; it waits in "
                "its slot",
                step,
                label,
                delay,
            )
        limits.sleep(delay)
        return None
    if action == "jump":
        assert then is not None and then.to is not None
        run.jumps += 1
        if run.jumps > limits.max_jumps:
            message = f"step '{step}': more than {limits.max_jumps} jumps"
            return PIPELINE_STATUS_FAILED, StepError("config_error", message)
        target = run.index - 1 if then.to in PREVIOUS_ALIASES else labels.index(then.to)
        run.index = max(target, 0)
        run.attempts.pop(labels[run.index], None)
        return None
    if action == "break":
        return PIPELINE_STATUS_BREAK, None
    # fail, quarantine
    failure = outcome.error or StepError("policy", f"task '{label}' failed by policy")
    if action == "quarantine":
        return PIPELINE_STATUS_QUARANTINED, failure
    return PIPELINE_STATUS_FAILED, failure


def _trace_retry(
    label: str, attempt: int, attempts: int, delay: float, outcome: ToolOutcome, parks: bool
) -> None:
    """A `retry` event on the command's span: which task, which attempt failed, why (the
    error's kind, and the HTTP status and Retry-After of an HTTP error) and the wait."""
    if not tracing.enabled():
        return
    error = outcome.error
    attributes: dict[str, tracing.AttributeValue] = {
        "task": label,
        "attempt": attempt,
        "attempts": attempts,
        "delay_seconds": delay,
        "parked": parks,
    }
    if error is not None:
        attributes["reason"] = error.kind
        if error.status_code is not None:
            attributes["http.status_code"] = error.status_code
        if error.retry_after is not None:
            attributes["retry_after_seconds"] = error.retry_after
    tracing.event("retry", attributes)


def _match(
    step: str, label: str, tool: ToolSpec, context: Mapping[str, Any], renderer: Renderer
) -> Then | None:
    # NoETL's order (task_sequence_executor `_evaluate_policy_rules`), see models.policy.Rule
    for i, rule in enumerate(tool.rules):
        if rule.else_ is not None:
            if rule.else_.then is not None:
                return rule.else_.then
            continue
        if rule.when is None:
            if rule.then is not None:
                return rule.then
            continue
        where = f"step '{step}' task '{label}' spec.policy.rules[{i}].when"
        if renderer.condition(rule.when, context, where):
            return rule.then or FAIL_WITHOUT_THEN
    return None


def _apply_set(
    mapping: Mapping[str, Any],
    context: Mapping[str, Any],
    run: RunState,
    where: str,
    renderer: Renderer,
) -> None:
    rendered = [
        (split_set_key(k), renderer.value(v, context, f"{where}.{k}")) for k, v in mapping.items()
    ]
    for (scope, name), value in rendered:
        (run.iter if scope == "iter" else run.ctx)[name] = value


def _bind(
    mapping: Mapping[str, Any],
    context: Mapping[str, Any],
    data: Any,
    run: RunState,
    where: str,
    renderer: Renderer,
    succeeded: bool = True,
) -> None:
    """A task's `set:`: every value rendered first (against the task's context and its
    `output`), then bound, so one key never sees another's new value. After a failure a
    key whose template reads what the failure lacks (`output.rows`) is not bound: a set
    written for the success does not turn a retried failure into a template error."""
    output = {**data, "data": data} if isinstance(data, dict) and "data" not in data else data
    set_context = {**context, "output": output}
    rendered: list[tuple[str, Any]] = []
    for key, template in mapping.items():
        try:
            rendered.append((key, renderer.value(template, set_context, f"{where}.{key}")))
        except UndefinedVariable:
            if succeeded:
                raise
    for key, value in rendered:
        if key.startswith(("iter.", "ctx.")):
            scope, name = split_set_key(key)
            (run.iter if scope == "iter" else run.ctx)[name] = value
            continue
        *parents, last = key.split(".")
        target = run.bound
        for part in parents:
            child = target.get(part)
            # a copy: the mapping may be a task's result, which a binding must not change
            child = target[part] = dict(child) if isinstance(child, dict) else {}
            target = child
        target[last] = value


def _exhausted(outcome: ToolOutcome, attempts: int) -> StepError:
    error = outcome.error or StepError("result_error", "task failed")
    return replace(
        error, message=f"{error.message} (gave up after {attempts} attempts)", attempts=attempts
    )


def _finish(run: RunState, status: str, failure: StepError | None, multi: bool) -> Outcome:
    last = run.last["data"] if run.last is not None else None
    result: dict[str, Any] = dict(last) if isinstance(last, dict) else {"data": last}
    result["status"] = status
    if multi:
        result["results"] = run.results
    if run.ctx:
        result["ctx"] = run.ctx
    # a continuation written by an older version may hold no detail
    detail: Detail = {**(run.last["detail"] or {})} if run.last is not None else {}
    meta: OutcomeMeta = {"runs": run.runs, "jumps": run.jumps, "last_task": run.last_label}
    if status == PIPELINE_STATUS_QUARANTINED:
        result["status"] = PIPELINE_STATUS_FAILED  # templates see a failure, as documented
        meta["quarantine"] = True
        status = PIPELINE_STATUS_FAILED
    if status == PIPELINE_STATUS_FAILED:
        assert failure is not None  # every way to fail a pipeline says why
        return Outcome("error", result, failure, run.ctx, run.iter, detail, meta)
    return Outcome(
        "ok" if status == "ok" else PIPELINE_STATUS_BREAK,
        result,
        None,
        run.ctx,
        run.iter,
        detail,
        meta,
    )
