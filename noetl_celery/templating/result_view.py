"""How step results look to templates.

NoETL wraps step results in a proxy: `{{ step.data.rows }}` works even when the result has
no `data` key (it falls back to the result itself), so both spellings seen in playbooks,
`{{ claim.rows }}` and `{{ claim.data.rows }}`, read the same rows. `ResultView` is that
proxy as a plain dict subclass (cheap, JSON-serialisable).
"""

from __future__ import annotations

from typing import Any

_FALLBACK_ATTRS = frozenset({"data", "result"})


class ResultView(dict[str, Any]):
    """A step result; `.data` / `.result` fall back to the result itself when absent."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name in _FALLBACK_ATTRS:
            return self
        raise AttributeError(name)


def wrap(result: Any) -> Any:
    return ResultView(result) if isinstance(result, dict) else result


def unwrap(value: Any) -> Any:
    """Return a plain value (rendered results must not leak the proxy type)."""
    return dict(value) if isinstance(value, ResultView) else value
