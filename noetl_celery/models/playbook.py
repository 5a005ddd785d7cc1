"""Pydantic models of a NoETL DSL v2 playbook (docs/reference/dsl.md §1).

The models accept what NoETL's runtime accepts (unknown tool fields, unknown step keys);
`noetl_celery.models.validation` turns unknown or wrong keys into located problems.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from noetl_celery.models.durations import (
    OptionalSeconds,
    OptionalSecondsOrTemplate,
    to_seconds,
)
from noetl_celery.models.policy import Policy, Rule
from noetl_celery.models.previous_result import reads_previous_result
from noetl_celery.models.rate_limit import RateLimit, parse_rate_limit
from noetl_celery.models.script_source import StoredScripts


class ToolOptions(BaseModel):
    """`tool.spec`: the policy and timeout of one tool / pipeline task."""

    model_config = ConfigDict(extra="allow")

    policy: Policy | None = None
    timeout: OptionalSeconds = Field(None, gt=0)  # seconds, or "500ms", "30s", "5m", "2h"


class ToolSpec(BaseModel):
    """One tool: `kind` plus kind-specific fields (kept in `model_extra`)."""

    model_config = ConfigDict(extra="allow")

    kind: str
    name: str | None = None
    spec: ToolOptions | None = None
    input: dict[str, Any] = Field(default_factory=dict)
    output: Any = None
    # a pipeline task's `set:` (NoETL tools' task_sequence): names bound from this task's
    # `output` for the tasks after it in the same pipeline (worker.pipeline)
    set: dict[str, Any] = Field(default_factory=dict)
    # keyed throttling of this tool's runs (models.rate_limit, worker.throttle): kept out
    # of the tool's fields, which are rendered and handed to the tool
    rate_limit: Any = None

    @property
    def limit(self) -> RateLimit | None:
        return parse_rate_limit(self.rate_limit)

    @property
    def rules(self) -> list[Rule]:
        if self.spec is None or self.spec.policy is None:
            return []
        return self.spec.policy.rules

    def fields(self) -> dict[str, Any]:
        """The tool mapping as written, minus `spec`/`input`/`output`/`set` (rendered
        separately)."""
        data: dict[str, Any] = {"kind": self.kind}
        if self.name is not None:
            data["name"] = self.name
        if self.spec is not None and self.spec.timeout is not None:
            data["timeout"] = self.spec.timeout
        data.update(self.model_extra or {})
        return data


def positive_or_template(value: int | str, what: str) -> int | str:
    """A positive integer, or a template string to render later."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a positive integer")
    if isinstance(value, str) and "{{" not in value:
        try:
            value = int(value)
        except ValueError:
            raise ValueError(f"{what} must be a positive integer") from None
    if isinstance(value, int) and value < 1:
        raise ValueError(f"{what} must be a positive integer")
    return value


class FrameSpec(BaseModel):
    """Cursor frame policy. `max_rows`, `row_concurrency`, `process` and `max_attempts`
    (runs of a claim that fails with a retryable error) steer the engine; the other
    fields are accepted for NoETL compatibility."""

    model_config = ConfigDict(extra="allow")

    # integers, or templates rendering to one (rendered when the loop epoch starts)
    max_rows: int | str = 1
    row_concurrency: int | str = 1
    # accepted for NoETL (its worker's frame lease and heartbeat): here leases are the
    # engine's own (NOETL_LEASE_SECONDS), so a template is kept as written, not rendered
    lease_seconds: OptionalSecondsOrTemplate = None
    heartbeat_seconds: OptionalSecondsOrTemplate = None
    max_seconds: OptionalSecondsOrTemplate = None
    max_bytes: int | None = None
    process: Literal["row", "frame"] = "row"
    # NoETL's frame attempts; here: runs of a claim whose queue database failed
    # retryably (None: NOETL_CLAIM_MAX_ATTEMPTS)
    max_attempts: int | str | None = None

    @field_validator("max_rows", "row_concurrency")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        return positive_or_template(value, "frame sizes")

    @field_validator("max_attempts")
    @classmethod
    def _positive_attempts(cls, value: int | str | None) -> int | str | None:
        return None if value is None else positive_or_template(value, "frame.max_attempts")


class LoopSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    mode: Literal["sequential", "parallel", "cursor"] = "sequential"
    # an int, or a template rendering to one (cursor loops allow templates)
    max_in_flight: int | str | None = None
    policy: Any = None
    frame: FrameSpec | None = None
    # what an item failure no task policy handled does: `fail` the execution (NoETL's
    # behaviour), or `quarantine` the item (counted apart; the execution completes)
    on_item_error: Literal["fail", "quarantine"] = "fail"

    @field_validator("max_in_flight")
    @classmethod
    def _positive(cls, value: int | str | None) -> int | str | None:
        return None if value is None else positive_or_template(value, "max_in_flight")


class CursorSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    kind: str = "postgres"
    auth: Any = None
    claim: str
    options: dict[str, Any] = Field(default_factory=dict)


class Loop(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    in_: Any = Field(None, alias="in")
    iterator: str
    cursor: CursorSpec | None = None
    spec: LoopSpec = Field(default_factory=LoopSpec)

    @property
    def is_cursor(self) -> bool:
        return self.cursor is not None


class Arc(BaseModel):
    # NoETL's Arc ignores keys it does not know (pydantic's default): so do we, with a
    # validation warning (models.validation.flow.check_arcs); legacy `args` is refused
    # there, as NoETL refuses it
    model_config = ConfigDict(extra="ignore")

    step: str
    when: str | bool | None = None
    set: dict[str, Any] = Field(default_factory=dict)
    spec: Any = None


class NextSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    mode: Literal["exclusive", "inclusive"] = "exclusive"
    # NoETL (noetl/core/dsl/engine/models/workflow.py `NextSpec`, executor/events.py):
    # when no arc matches, `complete` ends the execution once nothing else is pending and
    # `quiet` ends only this branch. Both are how routing works here: a branch with no
    # matching arc ends, and the execution ends COMPLETED when nothing else runs (a
    # `quiet` dead end with nothing else running does not leave it RUNNING).
    on_no_match: Literal["complete", "quiet"] = "complete"


class Next(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spec: NextSpec = Field(default_factory=NextSpec)
    arcs: list[Arc]


class Step(BaseModel):
    """One workflow step. Unknown keys are kept in `model_extra` for the validator."""

    model_config = ConfigDict(extra="allow")

    step: str
    desc: str | None = None
    # NoETL's enable guard (server `Step.when`): evaluated when the step is reached;
    # false => `step.skipped`, the step does not run and routing follows its arcs
    when: str | bool | None = None
    tool: ToolSpec | list[ToolSpec] | None = None
    input: dict[str, Any] = Field(default_factory=dict)
    set: dict[str, Any] = Field(default_factory=dict)
    loop: Loop | None = None
    next: Next | None = None
    spec: Any = None
    # keyed throttling of the step's body, per command (models.rate_limit)
    rate_limit: Any = None

    @property
    def limit(self) -> RateLimit | None:
        return parse_rate_limit(self.rate_limit)

    @model_validator(mode="after")
    def _no_tool_is_noop(self) -> Step:
        """A step without `tool` (NoETL's Python engine: "a terminal/non-actionable
        transition target") runs as `kind: noop`: its `set` and `next` apply."""
        if self.tool is None:
            self.tool = ToolSpec.model_validate({"kind": "noop"})
        return self

    @property
    def is_pipeline(self) -> bool:
        """A list of tools, or a single tool with policy rules (NoETL rewrites it into a
        one-task pipeline labelled `<step>_task`) or under `spec.on_error: retry` (our
        retry machinery is the pipeline's)."""
        if isinstance(self.tool, list):
            return True
        if self.tool is None:
            return False
        return bool(self.tool.rules) or step_on_error(self) == "retry"

    def tasks(self) -> list[tuple[str, ToolSpec]]:
        """The pipeline as (label, tool) pairs; unnamed tasks are `task_<index>`."""
        if self.tool is None:
            return []
        if isinstance(self.tool, ToolSpec):
            return [(f"{self.step}_task", self.tool)]
        return [(t.name or f"task_{i}", t) for i, t in enumerate(self.tool)]

    @property
    def arcs(self) -> list[Arc]:
        return self.next.arcs if self.next is not None else []

    @property
    def exclusive(self) -> bool:
        return self.next is None or self.next.spec.mode == "exclusive"


OnError = Literal["fail", "continue", "retry"]
ON_ERROR_VALUES: tuple[OnError, ...] = ("fail", "continue", "retry")


def step_on_error(step: Step) -> OnError:
    """A step's `spec.on_error` (NoETL server `StepSpec.on_error`; validation checks the
    value): `fail` (the default), `continue` or `retry`."""
    spec = step.spec
    value = spec.get("on_error") if isinstance(spec, dict) else None
    if isinstance(value, str):
        for known in ON_ERROR_VALUES:
            if value.strip().lower() == known:
                return known
    return "fail"


def step_timeout(step: Step) -> float | None:
    """A step's `spec.timeout` in seconds: a number or a duration string such as "30s"
    (validation checks it is a positive duration)."""
    spec = step.spec
    if isinstance(spec, dict):
        seconds = to_seconds(spec.get("timeout"))
        if seconds is not None and seconds > 0:
            return seconds
    return None


class WorkbookTask(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    tool: ToolSpec


class ExecutorSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    entry_step: str | None = None
    final_step: str | None = None


class Executor(BaseModel):
    model_config = ConfigDict(extra="allow")

    profile: str | None = None
    spec: ExecutorSpec | None = None


class Metadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    path: str | None = None
    description: str | None = None
    version: str | int | float | None = None


class Playbook(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    api_version: str = Field(alias="apiVersion")
    kind: Literal["Playbook"]
    metadata: Metadata
    workload: dict[str, Any] = Field(default_factory=dict)
    keychain: list[Any] = Field(default_factory=list)
    workbook: list[WorkbookTask] = Field(default_factory=list)
    executor: Executor | None = None
    workflow: list[Step] = Field(min_length=1)

    _steps: dict[str, Step] = PrivateAttr(default_factory=dict)
    _workbook: dict[str, WorkbookTask] = PrivateAttr(default_factory=dict)
    _scripts: StoredScripts = PrivateAttr(default_factory=StoredScripts)
    _graph: ArcGraph | None = PrivateAttr(default=None)
    _reads_result: dict[str, bool] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any, /) -> None:
        # first definition wins; duplicates are reported by validation
        for step in self.workflow:
            self._steps.setdefault(step.step, step)
        for task in self.workbook:
            self._workbook.setdefault(task.name, task)

    @property
    def catalog_path(self) -> str:
        return self.metadata.path or self.metadata.name

    @property
    def entry_step(self) -> str:
        spec = self.executor.spec if self.executor else None
        if spec is not None and spec.entry_step:
            return spec.entry_step
        return self.workflow[0].step

    def _step_map(self) -> dict[str, Step]:
        """`_steps`, read from the private map: the lookups below run several times per
        command, and `self._steps` goes through pydantic's `__getattr__`, which first asks
        the private attribute for a descriptor (an AttributeError raised and caught):
        1.5 µs a lookup against 0.05 µs, about 1 % of a worker's CPU on an API-bound flow."""
        steps: dict[str, Step] = self.__pydantic_private__["_steps"]  # type: ignore[index]
        return steps

    def step(self, name: str) -> Step:
        return self._step_map()[name]

    @property
    def step_names(self) -> Iterable[str]:
        return self._step_map().keys()

    def has_step(self, name: str) -> bool:
        return name in self._step_map()

    @property
    def graph(self) -> ArcGraph:
        """The arc graph (fan-in upstreams, reachability), computed once."""
        if self._graph is None:
            self._graph = ArcGraph.of(self._steps)
        return self._graph

    def reads_previous_result(self, name: str) -> bool:
        """Whether step `name` renders bare `{{ result }}` (models.previous_result)."""
        found = self._reads_result.get(name)
        if found is None:
            dumped = self.step(name).model_dump(mode="json", exclude_none=True)
            found = self._reads_result[name] = reads_previous_result(dumped)
        return found

    def workbook_task(self, name: str) -> WorkbookTask | None:
        return self._workbook.get(name)

    @property
    def scripts(self) -> StoredScripts:
        """The `script:` files stored with this catalog version (empty when none)."""
        return self._scripts

    def attach_scripts(self, scripts: StoredScripts) -> None:
        self._scripts = scripts

    def tools(self) -> Iterator[tuple[str, tuple[str | int, ...], ToolSpec]]:
        """Every tool with the step (or workbook task) it belongs to and its place in
        the document (`("workflow", 2, "tool", 0)`, for problem lines)."""
        for index, step in enumerate(self.workflow):
            if isinstance(step.tool, ToolSpec):
                yield step.step, ("workflow", index, "tool"), step.tool
            elif step.tool is not None:
                for position, tool in enumerate(step.tool):
                    yield step.step, ("workflow", index, "tool", position), tool
        for index, task in enumerate(self.workbook):
            yield task.name, ("workbook", index, "tool"), task.tool


@dataclass(frozen=True)
class ArcGraph:
    """The playbook's step graph as NoETL's server reads it for its fan-in barrier
    (orchestrate-core/src/orchestrator.rs `build_incoming_arcs`, `forward_reachable`,
    server v2.49.0 #142, ai-meta#83): `upstreams[t]` are the steps with an arc to `t`
    (a step with several arcs to `t` counts once), without back-edges (an upstream that
    `t` itself reaches again by arcs: a loop's way back); `reach[s]` is every step
    reachable from `s` by one or more arcs. A fan-in step has two or more upstreams."""

    upstreams: Mapping[str, frozenset[str]]
    reach: Mapping[str, frozenset[str]]

    @classmethod
    def of(cls, steps: Mapping[str, Step]) -> ArcGraph:
        targets = {
            name: [arc.step for arc in step.arcs if arc.step in steps]
            for name, step in steps.items()
        }
        reach: dict[str, frozenset[str]] = {}
        for name in steps:
            seen: set[str] = set()
            stack = list(targets[name])
            while stack:
                node = stack.pop()
                if node not in seen:
                    seen.add(node)
                    stack.extend(targets[node])
            reach[name] = frozenset(seen)
        incoming: dict[str, set[str]] = {}
        for name, outs in targets.items():
            for target in outs:
                if name not in reach[target]:  # not a back-edge
                    incoming.setdefault(target, set()).add(name)
        return cls({t: frozenset(ups) for t, ups in incoming.items()}, reach)

    def fan_in(self, step: str) -> frozenset[str]:
        """The upstreams a fan-in step waits for; empty for any other step."""
        ups = self.upstreams.get(step, frozenset())
        return ups if len(ups) > 1 else frozenset()

    def on_cycle(self, step: str) -> bool:
        return step in self.reach.get(step, frozenset())
