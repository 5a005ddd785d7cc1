"""`{{ result }}` in a step's fields: the result of the step whose arc entered it.

NoETL's fixtures write `input: {result: "{{ result }}"}` in a step reached from another
(noetl/e2e `root_scripts/test_script_loading.yaml`): `result` is not a variable there but
a root NoETL injects at execution time (`orchestrate-core/src/input_binding.rs` lists it
with `iter`, `_prev` and `output`), bound to the upstream step's output. Only steps whose
templates read the bare name need it, so only their commands name the routing step
(`meta.prev`); every other command is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import meta

PREVIOUS_RESULT = "result"
_JINJA = jinja2.Environment()
# a step's routing and guard are the orchestrator's (there `result` means the step's own)
_NOT_RENDERED_BY_THE_WORKER = frozenset({"next", "when", "step", "desc"})


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


@lru_cache(maxsize=4096)
def _reads(text: str) -> bool:
    if "{" not in text or PREVIOUS_RESULT not in text:
        return False
    try:
        return PREVIOUS_RESULT in meta.find_undeclared_variables(_JINJA.parse(text))
    except jinja2.TemplateSyntaxError:
        return False  # python code, not a template: its `result` is its own variable


def reads_previous_result(fields: dict[str, Any]) -> bool:
    """Whether a step's worker-rendered fields (its dumped model) read bare `result`."""
    return any(
        _reads(text)
        for key, value in fields.items()
        if key not in _NOT_RENDERED_BY_THE_WORKER
        for text in _strings(value)
    )
