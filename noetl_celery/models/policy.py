"""Task policies: `spec.policy.rules` of a tool or pipeline task (docs/reference/dsl.md §5.1)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from noetl_celery.models.durations import OptionalSeconds, Seconds

# `quarantine`: the task fails, and its loop item is set aside as quarantined instead of
# failed (counted apart, does not fail the execution; `noetl-celery quarantine` lists it)
Action = Literal["continue", "retry", "jump", "break", "fail", "quarantine"]
Backoff = Literal["none", "linear", "exponential", "fixed"]
# Jump targets that mean "the task before the current one".
PREVIOUS_ALIASES = frozenset({"previous", "prev", "_previous", "@previous"})


class Then(BaseModel):
    """What a matching rule does. `attempts` counts total runs (3 => at most 3 runs)."""

    model_config = ConfigDict(extra="forbid")

    do: Action
    attempts: int = Field(3, ge=1)
    backoff: Backoff = "none"
    delay: Seconds = Field(1.0, ge=0)  # seconds, or "500ms", "30s", "5m", "2h"
    max_delay: OptionalSeconds = Field(None, ge=0)
    to: str | None = None
    set: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _jump_needs_target(self) -> Then:
        if self.do == "jump" and not self.to:
            raise ValueError("`do: jump` needs `to: <task label>`")
        return self

    def retry_delay(self, retry_number: int) -> float:
        """Seconds to wait before retry `retry_number` (1 = the first retry).

        Deliberate difference from NoETL: `backoff: none` waits `delay` (NoETL ignores it).
        """
        n = max(1, retry_number)
        if self.backoff == "linear":
            value = self.delay * n
        elif self.backoff == "exponential":
            value = self.delay * (2 ** (n - 1))
        else:  # none / fixed
            value = self.delay
        if self.max_delay is not None:
            value = min(value, self.max_delay)
        return value


class ElseClause(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # None: an `else` without `then`, which NoETL skips (`models.legacy` empties it)
    then: Then | None = None


# The fallback of a rule that matches but has no `then` (NoETL raises, failing the task).
FAIL_WITHOUT_THEN = Then(do="fail", attempts=1, delay=0.0, max_delay=None)


class Rule(BaseModel):
    """`{when, then}` or `{else: {then}}`. A YAML boolean `when` is accepted.

    As NoETL's runtime (noetl/worker/task_sequence_executor.py `_evaluate_policy_rules`):
    an `else` without `then` and a rule with neither `when` nor `then` are skipped; a
    `then` without `when` always matches; a matching `when` without `then` fails the task.
    `models.legacy` warns about each of these.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    when: str | bool | None = None
    then: Then | None = None
    else_: ElseClause | None = Field(None, alias="else")

    @property
    def is_else(self) -> bool:
        return self.else_ is not None


class Policy(BaseModel):
    # `mode` and `on_unmatched` exist in NoETL's model but have no effect there either.
    model_config = ConfigDict(extra="allow")

    rules: list[Rule] = Field(default_factory=list)
    mode: str | None = None
    on_unmatched: str | None = None
