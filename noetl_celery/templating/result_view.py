"""How step results look to templates.

NoETL wraps step results in a proxy: `{{ step.data.rows }}` works even when the result has
no `data` key (it falls back to the result itself), so both spellings seen in playbooks,
`{{ claim.rows }}` and `{{ claim.data.rows }}`, read the same rows. `ResultView` is that
proxy as a plain dict subclass (cheap, JSON-serialisable). It also carries NoETL's names
for the stored result (models.shapes: an HTTP result's `body`, a postgres result's
`command_<i>`) as second keys for the same objects, so `{{ fetch_page }}` handed whole to
a python step has the `body` its code reads; the results row stays as stored.

`{{ step._ref }}` is the stored result's reference, `noetl://execution/<id>/result/<step>`
(NoETL: the `_ref` of an externalized result, which `kind: artifact` `action: get` loads).
Every result here is stored by reference in the engine's database, so every mapping
result has one; it is an attribute only, never a key of the result.
"""

from __future__ import annotations

from typing import Any

from noetl_celery.models.shapes import read_aliases

_FALLBACK_ATTRS = frozenset({"data", "result"})


def result_ref(execution_id: str, step: str) -> str:
    return f"noetl://execution/{execution_id}/result/{step}"


class ResultView(dict[str, Any]):
    """A step result; `.data` / `.result` fall back to the result itself when absent."""

    __slots__ = ("ref",)
    ref: str | None

    def __getattr__(self, name: str) -> Any:
        if name in _FALLBACK_ATTRS:
            return self
        raise AttributeError(name)


def wrap(result: Any, ref: str | None = None) -> Any:
    if not isinstance(result, dict):
        return result
    view = ResultView(result)
    view.update(read_aliases(result))
    view.ref = ref
    return view


def unwrap(value: Any) -> Any:
    """Return a plain value (rendered results must not leak the proxy type)."""
    return dict(value) if isinstance(value, ResultView) else value
