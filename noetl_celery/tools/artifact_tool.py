"""`kind: artifact` `action: get`: a stored step result, loaded by its reference.

NoETL's Python worker externalized large results and gave templates their `_ref`; a
later step loads the whole result with `kind: artifact`, `action: get`,
`input.result_ref: "{{ start._ref }}"` (noetl/e2e `test_output_select.yaml`; the Rust
tools crate keeps the shape as an alias of `result_fetch`). Here every result is stored
in the engine's database and `{{ step._ref }}` names it (templating.result_view): `get`
returns that step's result as stored. A reference to another execution's result, or to
a step this execution has no result of, fails naming it. `action: put` fails as it does
in NoETL's Rust tools: a step's result is stored by returning it.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from noetl_celery.templating.result_view import ResultView, result_ref, unwrap
from noetl_celery.tools.base import ToolCall, ToolOutcome

_REF = re.compile(r"^noetl://execution/(?P<execution>[^/]+)/result/(?P<step>[^/]+)$")


class ArtifactTool:
    kind: ClassVar[str] = "artifact"
    raw_fields: ClassVar[frozenset[str]] = frozenset()

    def run(self, call: ToolCall) -> ToolOutcome:
        action = str(call.config.get("action") or "get").strip().lower()
        where = f"step '{call.step}' artifact"
        if action != "get":
            return ToolOutcome.failure(
                "config_error",
                f"{where}: action {action!r} is not supported (only `get`); a step's "
                "result is stored by returning it",
            )
        ref = call.input.get("result_ref", call.config.get("result_ref"))
        if not isinstance(ref, str) or not ref:
            return ToolOutcome.failure(
                "config_error", f'{where}: needs `input.result_ref` (e.g. "{{{{ start._ref }}}}")'
            )
        found = _REF.match(ref.strip())
        if found is None:
            return ToolOutcome.failure(
                "config_error",
                f"{where}: result_ref {ref[:120]!r} is not a result reference "
                "(noetl://execution/<id>/result/<step>, as `{{ step._ref }}` gives)",
            )
        if found["execution"] != call.execution_id:
            return ToolOutcome.failure(
                "config_error",
                f"{where}: result_ref names execution {found['execution']}; a step can load "
                "results of its own execution only",
            )
        value: Any = call.context.get(found["step"])
        if not (
            isinstance(value, ResultView)
            and value.ref == result_ref(call.execution_id, found["step"])
        ):
            return ToolOutcome.failure(
                "config_error",
                f"{where}: execution {call.execution_id} has no stored result of step "
                f"{found['step']!r} (yet)",
            )
        return ToolOutcome.success(unwrap(value))
