"""Worker side: turn a claimed command into an outcome.

The command's render context is the `contexts` row of its version (variables and
pointers to step results) plus, for loop iterations, the iteration scope built from the
command's item. Results are immutable per (step, epoch), so every lookup is cached.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import replace
from functools import partial
from typing import Any

from noetl_celery.constants import KIND_CLAIM
from noetl_celery.errors import NoetlError, RateLimitKeyError, TemplateError
from noetl_celery.models.keychain import KeychainInvalid, check_startable
from noetl_celery.models.outcome import (
    ErrorKind,
    Outcome,
    OutcomeMeta,
    StepError,
    normalise_status,
)
from noetl_celery.models.playbook import Playbook, Step, ToolSpec, step_on_error
from noetl_celery.models.previous_result import PREVIOUS_RESULT
from noetl_celery.models.rate_limit import RateLimit
from noetl_celery.settings import Settings
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ClaimedCommand
from noetl_celery.templating import renderer_for
from noetl_celery.templating.context import build_context, iteration_names
from noetl_celery.templating.result_view import wrap
from noetl_celery.tools.base import ToolOutcome
from noetl_celery.tools.keychain import KeychainError
from noetl_celery.tools.redaction import current_masks, mask_command_value
from noetl_celery.tools.services import ToolServices
from noetl_celery.worker.claims import HeldFrame, run_claim
from noetl_celery.worker.pipeline import (
    ON_ERROR_RETRY,
    Parked,
    PipelineLimits,
    RunState,
    StopCheck,
    run_pipeline,
)
from noetl_celery.worker.subplaybook import Children, Suspend, Suspended, child_outcome
from noetl_celery.worker.throttle import CommandThrottle, LocalSlots, Throttled
from noetl_celery.worker.tool_call import run_tool


class StepRunner:
    def __init__(self, store: Store, services: ToolServices, settings: Settings) -> None:
        self.store = store
        self.services = services
        self.renderer = renderer_for(settings.template_mode, worker=True)
        self.limits = PipelineLimits(
            max_jumps=settings.max_pipeline_jumps,
            max_retry_delay=settings.max_retry_delay_seconds,
            renderer=self.renderer,
            park_after=settings.park_after_seconds,
            storable=holds_no_keychain_value,
        )
        # keyed rate_limit.concurrency slots where the engine database is one process's
        self._local_slots = LocalSlots()
        # (catalog id, step) -> whether the step mentions the keychain
        self._mentions: dict[tuple[int, str], bool] = {}

    def context_for(
        self, command: ClaimedCommand, step: Step, playbook: Playbook
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        snapshot = self.store.context(command.execution_id, command.ctx_version)
        results = {
            name: self.store.result(command.execution_id, name, epoch)
            for name, epoch in (snapshot.get("results") or {}).items()
        }
        extra: dict[str, Any] = {}
        scope = None
        if command.iteration is not None and step.loop is not None:
            meta = command.meta or {}
            cursor_row = None
            # a cursor body: where its row came from (docs/reference/dsl.md §4.6)
            if "lane" in meta:
                slot = f"{command.epoch}:slot-{meta['lane']}"
                cursor_row = {
                    "_worker_slot_id": slot,
                    "_frame_index": meta["frame"],
                    "_frame_row_index": command.iteration - meta.get("frame_start", 0),
                }
                if meta.get("process") == "frame":  # the whole frame: item = its rows
                    extra["frame"] = {
                        "index": meta["frame"],
                        "row_count": meta.get("frame_rows"),
                        "rows": command.item,
                        "worker_slot_id": slot,
                    }
            names = iteration_names(
                step.loop.iterator, command.item, command.iteration, meta.get("total"), cursor_row
            )
            scope = names["iter"]
            extra.update(names)
        prev = (command.meta or {}).get("prev")
        variables = snapshot.get("vars") or {}
        if prev in results and PREVIOUS_RESULT not in results and PREVIOUS_RESULT not in variables:
            # the routing step's result, NoETL's injected `result` (models.previous_result)
            extra[PREVIOUS_RESULT] = wrap(results[prev])
        context = build_context(
            variables,
            results,
            execution_id=command.execution_id,
            extra=extra,
            steps=playbook.step_names,
        )
        return context, scope

    def _needs_keychain(self, playbook: Playbook, catalog_id: int, step: Step) -> bool:
        """Whether the step mentions `keychain` or `token(` anywhere (its tools, input,
        python code, the workbook tasks it may call). NoETL's worker resolves entries
        only for a command whose config refers to them too: a step that uses none runs
        even while a token endpoint is down, and never holds a value."""
        key = (catalog_id, step.step)
        found = self._mentions.get(key)
        if found is None:
            text = step.model_dump_json()
            if '"workbook"' in text:
                text += "".join(task.model_dump_json() for task in playbook.workbook)
            found = self._mentions[key] = "keychain" in text or "token(" in text
        return found

    def keychain(
        self, playbook: Playbook, command: ClaimedCommand, context: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The playbook's keychain entries for this command (tools.keychain: cached in
        this process), their values masked in everything the command leaves behind."""
        resolved, redactor = self.services.keychain.resolve(
            playbook.keychain,
            playbook=playbook.catalog_path,
            execution_id=command.execution_id,
            context=context,
        )
        masks = current_masks()
        if masks is not None:
            masks.add(redactor)
        return resolved

    def run(
        self,
        playbook: Playbook,
        command: ClaimedCommand,
        children: Children | None = None,
        stop: StopCheck | None = None,
    ) -> Outcome | Suspended | Parked | HeldFrame:
        """The command's outcome, `Suspended` when it must wait for a child, `Parked` when
        it must wait out a long retry delay, or a claim's `HeldFrame`."""
        started = time.monotonic()
        step = playbook.step(command.step)
        context, scope = self.context_for(command, step, playbook)
        if playbook.keychain:
            try:
                # an execution started without Engine's check (a sub-playbook, a
                # schedule) with an entry that cannot work here fails its first command
                check_startable(playbook.keychain)
                if self._needs_keychain(playbook, command.catalog_id, step):
                    context["keychain"] = self.keychain(playbook, command, context)
            except KeychainInvalid as exc:
                return Outcome.failed(StepError("config_error", str(exc)))
            except KeychainError as exc:
                return Outcome.failed(StepError(exc.kind, str(exc)))
        if command.kind == KIND_CLAIM:
            return run_claim(step, command, context, self.services, self.renderer)
        # a continuation to go on from: after a child's end, or after a parked retry delay
        waited = command.resume and ("child" in command.resume or "parked" in command.resume)
        resume = command.resume if waited else None
        throttle = self._throttle(command, resume)
        # the step's rate_limit (and a single tool's) gates the body; a body resumed
        # after its child ended is under way already
        gates = [] if resume is not None and "child" in resume else _step_gates(step)
        stack = ExitStack()
        try:
            for limit in gates:
                stack.enter_context(throttle.gate(limit, context, f"step '{step.step}'"))
        except Throttled as wait:
            stack.__exit__(*sys.exc_info())  # the gates passed keep their booked turns
            return _parked_before(step, scope, resume, wait)
        except NoetlError as exc:  # the key rendered to nothing usable for this item
            stack.close()
            kind: ErrorKind = "template_error" if isinstance(exc, TemplateError) else "config_error"
            return Outcome.failed(StepError(kind, str(exc)))
        with stack:
            outcome = self._body(
                step, playbook, command, context, scope, resume, throttle, stop, children
            )
        if isinstance(outcome, Suspended | Parked):
            return outcome
        meta: OutcomeMeta = {
            **outcome.meta,
            "duration_ms": round((time.monotonic() - started) * 1000, 3),
            "attempt": command.attempt,
        }
        # only steps with `set` read the iteration scope back
        keep_iter = scope is None or bool(step.set)
        return replace(outcome, meta=meta, iter=outcome.iter if keep_iter else None)

    def _throttle(
        self, command: ClaimedCommand, resume: Mapping[str, Any] | None
    ) -> CommandThrottle:
        parked = (resume or {}).get("parked")
        booked = parked.get("booked") if isinstance(parked, dict) else None
        slots = self.store.throttle if self.store.throttle.available else self._local_slots
        return CommandThrottle(
            slots,
            self.services.keyed_pacer,
            command.command_id,
            self.renderer,
            self.limits.park_after,
            booked=_booked(booked),
        )

    def _body(
        self,
        step: Step,
        playbook: Playbook,
        command: ClaimedCommand,
        context: dict[str, Any],
        scope: dict[str, Any] | None,
        resume: Mapping[str, Any] | None,
        throttle: CommandThrottle,
        stop: StopCheck | None,
        children: Children | None,
    ) -> Outcome | Suspended | Parked:
        call = partial(
            run_tool,
            playbook=playbook,
            services=self.services,
            execution_id=command.execution_id,
            step=step.step,
            command_id=command.command_id,
            children=children,
            renderer=self.renderer,
        )

        def run_task(
            label: str, tool: ToolSpec, task_context: Mapping[str, Any], key: str
        ) -> ToolOutcome:
            where = f"step '{step.step}' task '{label}'"
            task = partial(
                call,
                tool=tool,
                context=task_context,
                step_input={},
                where=where,
                in_pipeline=True,
                spawn_key=f"{command.command_id}#{key}",
            )
            limit = tool.limit
            if limit is None:
                return task()
            try:
                gate = throttle.gate(limit, task_context, where)
                gate.__enter__()
            except RateLimitKeyError as exc:  # this item's key: the task's error
                return ToolOutcome.failure("config_error", str(exc))
            except TemplateError as exc:
                return ToolOutcome.failure("template_error", str(exc))
            with ExitStack() as stack:
                stack.push(gate)
                return task()

        outcome: Outcome | Suspended | Parked
        if step.is_pipeline:
            try:
                step_input = self.renderer.value(step.input, context, f"step '{step.step}' input")
            except NoetlError as exc:
                return Outcome.failed(StepError("template_error", str(exc)))
            context = {**context, **step_input}
            outcome = run_pipeline(
                step.step,
                step.tasks(),
                context,
                scope,
                run_task,
                self.limits,
                resume,
                stop,
                on_error=ON_ERROR_RETRY if step_on_error(step) == "retry" else None,
            )
        else:
            assert isinstance(step.tool, ToolSpec)
            try:
                single = (
                    child_outcome(resume["child"])
                    if resume is not None and "child" in resume
                    else call(
                        tool=step.tool,
                        context=context,
                        step_input=step.input,
                        where=f"step '{step.step}'",
                        in_pipeline=False,
                        spawn_key=f"{command.command_id}#{step.step}#1",
                    )
                )
            except Suspend as suspend:
                return Suspended({"single": True}, suspend.request)
            outcome = single_outcome(single, scope if step.set else None)
        return outcome


def single_outcome(outcome: ToolOutcome, iter_scope: Mapping[str, Any] | None) -> Outcome:
    """A single-tool step fails when its result says `status: error|failed|failure`
    (NoETL: python steps use `{"status": "failed"}` as an assertion)."""
    if outcome.ok and isinstance(outcome.data, dict):
        status = normalise_status(outcome.data.get("status"))
        if status == "error":
            message = outcome.data.get("message") or outcome.data.get("error")
            text = f"result has status '{outcome.data.get('status')}'"
            if message:
                text = f"{text}: {message}"
            error = StepError("result_error", text)
            return Outcome("error", outcome.data, error, iter=iter_scope, detail=outcome.detail)
    return Outcome(
        outcome.status, outcome.data, outcome.error, iter=iter_scope, detail=outcome.detail
    )


def holds_no_keychain_value(state: dict[str, Any]) -> bool:
    """Whether `state` survives the masking a stored continuation gets (the command's
    keychain values, and secret-looking text: a password in a URL, `token=...`) unchanged."""
    return bool(mask_command_value(state) == state)


def _step_gates(step: Step) -> list[RateLimit]:
    """The rate limits around a step's whole body: its own, and a single tool's (a
    pipeline's tools are gated task by task)."""
    gates = [step.limit]
    if not step.is_pipeline and isinstance(step.tool, ToolSpec):
        gates.append(step.tool.limit)
    return [limit for limit in gates if limit is not None]


def _parked_before(
    step: Step,
    scope: Mapping[str, Any] | None,
    resume: Mapping[str, Any] | None,
    wait: Throttled,
) -> Parked:
    """The command parked before its body for a rate_limit turn: it resumes where it
    was (a parked pipeline's continuation), or from the start."""
    if step.is_pipeline:
        continuation = (resume or {}).get("continuation") or RunState(
            iter=dict(scope or {})
        ).to_json()
        task = step.tasks()[0][0]
    else:
        continuation, task = {"single": True}, step.step
    return Parked(continuation, wait.delay, task, wait.booked, wait.key, wait.turn, wait.settled)


def _booked(stored: Any) -> dict[str, list[float]] | None:
    """The send slots a parked command booked (`worker.throttle.Booked`), as its resume
    holds them: key -> [booked at, rate(, when to send(, placed at))]."""
    if not isinstance(stored, dict):
        return None
    return {
        str(key): [float(part) for part in value]
        for key, value in stored.items()
        if isinstance(value, list) and len(value) in (2, 3, 4)
    }
