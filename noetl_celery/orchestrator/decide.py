"""The orchestrator's decision function: (playbook, state, completions) -> Decision.

Pure: it reads immutable history through `Facts` and returns what to write and issue;
the engine persists the decision in one transaction. Called with the same inputs it
returns the same decision, which is what makes a crashed pass safe to redo.

Semantics (docs/reference/dsl.md §1.5-§1.8, §4; docs/design.md §7):
- arcs are evaluated after a non-loop step's `call.done` *and* `call.error`, and after a
  loop step's `loop.done` only; `exclusive` fires the first match, `inclusive` all;
- a failure is *handled* when a guarded arc (one with `when`) matched it; an unhandled
  failure makes the execution FAILED once nothing is left running (unconditional arcs
  are still followed, as NoETL does);
- a non-loop step already running is not entered twice; re-entering a finished loop
  starts a new epoch; an empty loop completes at once;
- the execution is terminal when no command is in flight and the pass issued nothing.

Fan-in barrier and untaken exclusive branches: orchestrator.joins.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from noetl_celery.constants import (
    CALL_DONE,
    CALL_ERROR,
    COMPLETED,
    EV_EXECUTION_COMPLETED,
    EV_EXECUTION_FAILED,
    EV_STEP_FAILED,
    FAILED,
    KIND_STEP,
    RUNNING,
    StepStatus,
)
from noetl_celery.errors import NoetlError, playbooks_fault
from noetl_celery.models.outcome import StepError, error_message, output_view
from noetl_celery.models.playbook import Playbook, Step, step_on_error
from noetl_celery.orchestrator import cursor, guards, joins, loops
from noetl_celery.orchestrator.decisions import (
    Completion,
    Decision,
    EngineEvent,
    ExecutionError,
    Facts,
    Limits,
    LoopMirror,
    NewCommand,
    ResultWrite,
    Terminal,
)
from noetl_celery.orchestrator.ids import step_command_id
from noetl_celery.orchestrator.state import ExecutionState, StepFailure, copy_state
from noetl_celery.orchestrator.variables import apply_set
from noetl_celery.templating import renderer_for
from noetl_celery.templating.context import build_context

# unhandled failures an execution's snapshot keeps (the rest are counted)
FAILURES_KEPT = 20


class Pass:
    """One orchestration pass: folds completions, routes, and collects the decision."""

    def __init__(
        self,
        playbook: Playbook,
        state: ExecutionState,
        facts: Facts,
        limits: Limits,
        now: float,
    ) -> None:
        self.playbook = playbook
        self.state = state
        self.facts = facts
        self.limits = limits
        # the pass's time (epoch seconds), read once by the engine: templates' `now()`
        # renders it, so a pass redone (or replayed) renders what the first one did
        self.now = now
        self._now_text = dt.datetime.fromtimestamp(now, dt.UTC).isoformat()
        self.renderer = renderer_for(limits.template_mode, worker=False)
        self.decision = Decision(state=state)
        self._fresh: dict[tuple[str, int], Any] = {}  # results written in this pass
        self._dirty = False  # vars / result pointers changed since the last version
        self.touched_loops: set[str] = set()
        # the loops as the pass found them: the decision mirrors those it changed
        self.loops_before = loops.mirrors_of(state)
        self.finished_loops: list[LoopMirror] = []  # epochs finished in this pass
        self._idle_hops = 0
        self._entries: deque[joins.Entry] = deque()  # steps to enter in this pass

    # ---- context ----------------------------------------------------------------------------
    def result_of(self, step: str, epoch: int) -> Any:
        key = (step, epoch)
        if key in self._fresh:
            return self._fresh[key]
        return self.facts.result(step, epoch)

    def context(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        results = {
            name: self.result_of(name, ep) for name, ep in self.state.result_pointers().items()
        }
        context = build_context(
            self.state.vars,
            results,
            execution_id=self.state.execution_id,
            extra=extra,
            steps=self.playbook.step_names,
        )
        # shadows the environment's wall-clock `now()`; like that global, any name of
        # the context (a variable or step called `now`) still wins over it
        context.setdefault("now", self.pass_time)
        return context

    def pass_time(self) -> str:
        """`now()` in the orchestrator's templates: the pass's time, not the clock's."""
        return self._now_text

    def touch(self) -> None:
        """Variables or result pointers changed: the next command needs a new context."""
        self._dirty = True

    def ctx_version(self) -> int:
        """The context version new commands render with; a changed context gets a new
        version, snapshotted once (`contexts` row) before the first command uses it."""
        state = self.state
        if self._dirty:
            state.ctx_version += 1
            self._dirty = False
        if state.context_written < state.ctx_version:
            self.decision.contexts[state.ctx_version] = {
                "vars": copy.deepcopy(state.vars),
                "results": state.result_pointers(),
            }
            state.context_written = state.ctx_version
        return state.ctx_version

    # ---- results and failures ---------------------------------------------------------------
    def record_result(self, step: str, epoch: int, status: str, data: Any) -> None:
        self._fresh[(step, epoch)] = data
        self.decision.results.append(ResultWrite(step, epoch, status, data))
        self.state.step(step).result_epoch = epoch
        self.touch()

    def fail(self, step: str, epoch: int, message: str, error: StepError | None = None) -> None:
        """Record an unhandled failure of `step`; the execution will end FAILED."""
        st = self.state.step(step)
        st.status = StepStatus.FAILED
        failure: StepFailure = {"step": step, "epoch": epoch, "message": message}
        stored = error.to_json() if error is not None else None
        if stored is not None:
            failure["error"] = stored
        if len(self.state.failures) < FAILURES_KEPT:
            self.state.failures.append(failure)
        else:  # a step that fails every epoch must not grow the snapshot without bound
            self.state.failures_dropped += 1
        self.decision.events.append(
            EngineEvent(EV_STEP_FAILED, step, epoch, {"message": message, "error": stored})
        )

    # ---- entering steps ---------------------------------------------------------------------
    def enter(
        self,
        name: str,
        extra: Mapping[str, Any] | None = None,
        source: str | None = None,
        origin: joins.Origin | None = None,
    ) -> None:
        self._entries.append(joins.Entry(name, extra, source, origin))

    def _drain_entries(self) -> None:
        while True:
            while self._entries:
                self._drain_one()
            if not self._release_joins():
                return

    def _drain_one(self) -> None:
        entry = self._entries.popleft()
        name = entry.name
        if not entry.released and not self._arrive(entry):
            return  # waits at its fan-in barrier
        step = self.playbook.step(name)
        issued_before = len(self.decision.commands) + len(self.decision.issues)
        if self._enabled(step, entry):
            if step.loop is not None:
                loops.enter_loop(self, step)
            else:
                self._enter_plain(step, entry.source)
        if len(self.decision.commands) + len(self.decision.issues) == issued_before:
            self._idle_hops += 1
            if self._idle_hops > self.limits.max_idle_transitions:
                self.fail(
                    name,
                    self.state.step(name).epoch,
                    "routing cycle that issues no work (too many transitions)",
                )
                self._entries.clear()

    # ---- fan-in barrier (orchestrator.joins) ------------------------------------------------
    def _queued(self) -> set[str]:
        return {entry.name for entry in self._entries}

    def _arrive(self, entry: joins.Entry) -> bool:
        if entry.source is None or entry.source not in self.playbook.graph.fan_in(entry.name):
            return True  # most entries: no barrier, and no set of the queue built
        return joins.arrive(self.state, self.playbook.graph, entry, self._queued())

    def _release_joins(self) -> bool:
        """Enter the waiting fan-in steps whose barrier passed (a branch ended), in their
        last arrival's arc context; any?"""
        released = joins.released(self.state, self.playbook.graph, self._queued())
        for name, record in released:
            self._entries.append(joins.arc_entry(name, record, self.result_of))
        return bool(released)

    def _skip_untaken(self, step: Step) -> None:
        targets = [a.step for a in step.arcs if self.playbook.has_step(a.step)]
        mode = "exclusive" if step.exclusive else "inclusive"
        graph = self.playbook.graph
        for event in joins.skip_untaken(
            self.state, graph, step.step, mode, targets, self._queued()
        ):
            self.decision.events.append(event)

    def _enabled(self, step: Step, entry: joins.Entry) -> bool:
        """The step's enable guard (orchestrator.guards); a skipped step's chain goes on
        through the first of its arcs that matches."""
        enabled, chained = guards.evaluate(self, step, entry.extra)
        if chained is not None:
            target, context = chained
            self.enter(target, context, step.step, entry.origin)
        return enabled

    def _enter_plain(self, step: Step, source: str | None = None) -> None:
        st = self.state.step(step.step)
        if st.in_flight > 0:
            return  # already issued and not finished: NoETL deduplicates the entry
        st.epoch += 1
        st.in_flight += 1
        st.status = StepStatus.RUNNING
        self.state.in_flight += 1
        reads_result = source is not None and self.playbook.reads_previous_result(step.step)
        self.decision.commands.append(
            NewCommand(
                command_id=step_command_id(self.state.execution_id, step.step, st.epoch),
                step=step.step,
                kind=KIND_STEP,
                epoch=st.epoch,
                ctx_version=self.ctx_version(),
                meta={"prev": source} if reads_result else None,  # models.previous_result
            )
        )

    # ---- routing ----------------------------------------------------------------------------
    def route(self, step: Step, epoch: int, output: Mapping[str, Any], event_name: str) -> bool:
        """Evaluate the step's arcs; return True if a guarded arc matched (handled)."""
        handled = False
        extra = {
            "output": output,
            "event": {"name": event_name, "step": step.step},
            "error": output.get("error"),
        }
        for index, arc in enumerate(step.arcs):
            where = f"step '{step.step}' next.arcs[{index}].when"
            try:
                matched = self.renderer.condition(arc.when, self.context(extra), where)
                if matched and arc.set:
                    context = self.context(extra)
                    where_set = f"step '{step.step}' arc set"
                    apply_set(self.state.vars, arc.set, context, where_set, renderer=self.renderer)
                    self.touch()
            except NoetlError as exc:
                if not playbooks_fault(exc):
                    raise
                self.fail(step.step, epoch, str(exc))
                return True  # the failure is recorded; do not double-report it
            if not matched:
                continue
            handled = handled or arc.when is not None
            self.enter(arc.step, extra, step.step, (step.step, epoch))
            if step.exclusive:
                break
        self._skip_untaken(step)
        return handled

    # ---- completions ------------------------------------------------------------------------
    def on_completion(self, completion: Completion) -> None:
        if not self.playbook.has_step(completion.step):
            return  # a step removed from the playbook cannot exist: ignore defensively
        step = self.playbook.step(completion.step)
        if completion.parked_for is not None:  # not terminal: the item waits its turn
            loops.on_parked(self, step, completion)
        elif completion.iteration is not None:
            loops.on_iteration(self, step, completion)
        elif step.loop is not None and step.loop.is_cursor:
            cursor.on_claim(self, step, completion)
        else:
            self._on_step_done(step, completion)
        self._drain_entries()

    def _on_step_done(self, step: Step, completion: Completion) -> None:
        st = self.state.step(step.step)
        if completion.epoch != st.epoch or st.in_flight == 0:
            return  # a stale duplicate (another attempt already finished this epoch)
        st.in_flight -= 1
        self.state.in_flight -= 1
        outcome = completion.outcome
        ok = completion.ok
        self.record_result(step.step, completion.epoch, "ok" if ok else "error", outcome.result)
        if outcome.ctx:
            self.state.vars.update(outcome.ctx)
            self.touch()
        output = output_view(outcome)
        if ok:
            st.status = StepStatus.COMPLETED
            self.state.last_step = step.step
            if step.set:
                try:
                    context = self.context({"output": output, "event": {"name": CALL_DONE}})
                    where_set = f"step '{step.step}' set"
                    apply_set(self.state.vars, step.set, context, where_set, renderer=self.renderer)
                    self.touch()
                except NoetlError as exc:
                    if not playbooks_fault(exc):
                        raise
                    self.fail(step.step, completion.epoch, str(exc))
                    return
            self.route(step, completion.epoch, output, CALL_DONE)
            return
        st.status = StepStatus.FAILED
        handled = self.route(step, completion.epoch, output, CALL_ERROR)
        if not handled and step_on_error(step) != "continue":
            self.fail(step.step, completion.epoch, error_message(outcome.error), outcome.error)

    # ---- end of pass ------------------------------------------------------------------------
    def finish(self) -> Decision:
        state = self.state
        self.decision.loops = loops.mirrors(self)
        if state.status != RUNNING or state.in_flight > 0 or self.decision.issued_work:
            return self.decision  # already terminal (a duplicate), or work remains
        if state.failures:
            first = state.failures[0]
            message = f"step '{first['step']}' failed: {first['message']}"
            if len(state.failures) + state.failures_dropped > 1:
                more = len(state.failures) + state.failures_dropped - 1
                message += f" (and {more} more failure{'s' if more > 1 else ''})"
            error: ExecutionError = {"message": message, "failures": state.failures}
            # no result: the last step that happened to succeed is not the run's result
            terminal = Terminal(FAILED, None, error)
            event = EV_EXECUTION_FAILED
        else:
            terminal = Terminal(COMPLETED, self._last_result(), None)
            event = EV_EXECUTION_COMPLETED
        state.status = terminal.status
        self.decision.terminal = terminal
        self.decision.events.append(
            EngineEvent(
                event, state.last_step, None, {"status": terminal.status, "error": terminal.error}
            )
        )
        return self.decision

    def _last_result(self) -> Any:
        name = self.state.last_step
        if name is None:
            return None
        epoch = self.state.step(name).result_epoch
        return None if epoch is None else self.result_of(name, epoch)


def initial_variables(playbook: Playbook, payload: dict[str, Any] | None) -> dict[str, Any]:
    """Workload defaults with the execute payload merged on top (a dict payload key `ctx`
    is merged flat, as NoETL does)."""
    return merge_payload(playbook.workload, payload)


def merge_payload(variables: dict[str, Any], payload: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of `variables` with `payload` merged on top, as a payload is merged over the
    workload (a rerun's `--set` over the variables it starts from)."""
    merged: dict[str, Any] = copy.deepcopy(variables)
    for key, value in (payload or {}).items():
        if key == "ctx" and isinstance(value, dict):
            merged.update(copy.deepcopy(value))
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def start(
    playbook: Playbook,
    execution_id: str,
    payload: dict[str, Any] | None,
    facts: Facts,
    limits: Limits | None = None,
    *,
    now: float,
    entry: str | None = None,
    variables: dict[str, Any] | None = None,
    results: dict[str, Any] | None = None,
    loop_items: dict[str, list[Any]] | None = None,
    halt_after: Sequence[str] = (),
) -> Decision:
    """The first pass: initial variables and the entry step.

    A rerun (passes.rerun) starts elsewhere: at `entry` instead of the first step, with
    `variables` instead of workload + payload, with the `results` of steps that ran
    before (recorded as their epoch 0, so `{{ step.x }}` renders them; nothing runs
    them), and with `loop_items`: the first epoch of each of those loop steps runs
    these items instead of rendering `loop.in` (planned now, stored once), or instead of
    claiming from a `loop.cursor`'s queue (a redrive of rows the original claimed). `now` is the
    pass's time (epoch seconds). `halt_after`: loop steps whose `loop.done` routes
    nowhere (a redrive runs its items and nothing else). Plain data in, a decision out:
    the same inputs give the same decision."""
    if variables is None:
        variables = initial_variables(playbook, payload)
    state = ExecutionState(execution_id=execution_id, vars=copy.deepcopy(variables))
    state.halt = list(halt_after)
    run = Pass(playbook, state, facts, limits or Limits(), now)
    name = entry or playbook.entry_step
    for step, data in (results or {}).items():
        run.record_result(step, 0, "ok", data)
        state.step(step).status = StepStatus.COMPLETED
    problem = loops.given_problem(playbook, name, loop_items or {})
    if problem is not None:
        run.fail(name, 0, problem)
        return run.finish()
    loops.plan_given(run, playbook, loop_items or {})
    run.enter(name)
    run._drain_entries()
    return run.finish()


def decide(
    playbook: Playbook,
    state: ExecutionState,
    completions: Iterable[Completion],
    facts: Facts,
    limits: Limits | None,
    now: float,
) -> Decision:
    """Fold `completions` (oldest first) into `state` and decide what happens next.

    A function of its arguments: `now` is the pass's time (epoch seconds, read once by
    the caller), history beyond `state` is read through `facts`, and `state` is left as
    it was: the pass works on a copy, returned as `decision.state`.
    """
    state = copy_state(state)
    run = Pass(playbook, state, facts, limits or Limits(), now)
    if state.status != RUNNING:
        return run.decision  # terminal executions ignore late completions
    for completion in completions:
        run.on_completion(completion)
    return run.finish()
