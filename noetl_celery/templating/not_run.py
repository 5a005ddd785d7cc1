"""A step of the playbook that has no result, as templates see it.

`{{ process_high.category if process_high else process_low.category }}` after an
exclusive branch (noetl/e2e `comprehensive_test.yaml`) names a step that did not run.
NoETL renders undefined names leniently, so the test is false there; a strict undefined
here made the run fail. A name that is a step of the playbook is not a typo: it is bound
to `StepNotRun`, false in a test and not `defined`, while reading a field of it or
printing it still fails, saying the step has no result. Names the playbook does not
define stay strictly undefined.
"""

from __future__ import annotations

from noetl_celery.templating.environment import NoetlUndefined


class StepNotRun(NoetlUndefined):
    __slots__ = ()

    def __bool__(self) -> bool:  # type: ignore[override]  # strict: never; here: false
        return False


def not_run(step: str) -> StepNotRun:
    return StepNotRun(
        hint=f"step '{step}' has no result (it has not run, or was skipped)", name=step
    )
