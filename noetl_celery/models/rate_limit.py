"""`rate_limit:` on a tool or a step (docs/reference/dsl.md, keyed throttling).

```yaml
rate_limit: {key: "{{ iter.shop.tenant }}", per_second: 5, burst: 2, concurrency: 2}
```

`key` (a template, rendered per command: a tenant, a credential alias) names one limit
shared by every execution and worker of the fleet; `per_second` is its declared rate
(a ceiling: a 429 learns a lower one, worker.throttle), `burst` how many requests may
go at once after a quiet spell (1: evenly spaced), `concurrency` how many bodies under
the key run at once. At least one of `per_second` and `concurrency` is given.

Pure: `rate_limit_problems` is what validation reports (field, message), and
`parse_rate_limit` the value the worker enforces (None for a block that has problems:
validation refused the playbook already).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from noetl_celery.models.durations import is_template

FIELDS = ("key", "per_second", "burst", "concurrency")
# a rendered key is stored as a pacing row's name (`key:<key>`, 300 characters at most)
MAX_KEY_LENGTH = 250
KEY_PREFIX = "key:"


@dataclass(frozen=True)
class RateLimit:
    """A block as written: each number may be a template (`"{{ iter.shop.rate }}"`),
    rendered per command (`resolved`)."""

    key: str  # a template, rendered per command
    per_second: float | str | None = None
    burst: int | str = 1
    concurrency: int | str | None = None


@dataclass(frozen=True)
class Resolved:
    """A block's numbers for one command (rendered, checked)."""

    per_second: float | None
    burst: int
    concurrency: int | None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def rate_limit_problems(raw: Any) -> list[tuple[str | None, str]]:
    """What is wrong with a `rate_limit` block: (its field or None, a one-line message
    saying what to write instead)."""
    if not isinstance(raw, dict):
        return [
            (
                None,
                "`rate_limit` is a mapping: {key: TEMPLATE, per_second: N, burst: N, "
                "concurrency: N}",
            )
        ]
    problems: list[tuple[str | None, str]] = [
        (str(name), f"unknown `rate_limit` field `{name}`; known: {', '.join(FIELDS)}")
        for name in raw
        if name not in FIELDS
    ]
    problems += _value_problems(raw)
    problems += _key_problems(raw)
    return problems


def _value_problems(raw: dict[str, Any]) -> list[tuple[str | None, str]]:
    problems: list[tuple[str | None, str]] = []
    per_second = raw.get("per_second")
    if per_second is not None and not is_template(per_second):
        rate = _number(per_second)
        if rate is None or not math.isfinite(rate) or rate <= 0:
            problems.append(
                ("per_second", f"`rate_limit.per_second` is a number above 0, not {per_second!r}")
            )
    for name in ("burst", "concurrency"):
        value = raw.get(name)
        if value is None or is_template(value):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(
                (name, f"`rate_limit.{name}` is a whole number of 1 or more, not {value!r}")
            )
    if raw.get("burst") is not None and per_second is None:
        problems.append(("burst", "`rate_limit.burst` needs `per_second` (the rate it bursts at)"))
    return problems


def _key_problems(raw: dict[str, Any]) -> list[tuple[str | None, str]]:
    key = raw.get("key")
    limits = [name for name in ("per_second", "burst", "concurrency") if raw.get(name) is not None]
    if key is None or (isinstance(key, str) and not key.strip()):
        if limits:
            return [
                (
                    "key",
                    f"`rate_limit.{limits[0]}` is per key: add `key:` (a template such as "
                    '"{{ iter.shop.tenant }}", or a fixed name)',
                )
            ]
        return [("key", "`rate_limit` needs `key:` and `per_second` or `concurrency`")]
    if isinstance(key, bool) or not isinstance(key, str | int):
        return [("key", f"`rate_limit.key` is a string or a template, not {key!r}")]
    if len(str(key)) > MAX_KEY_LENGTH:
        return [("key", f"`rate_limit.key` is longer than {MAX_KEY_LENGTH} characters")]
    if raw.get("per_second") is None and raw.get("concurrency") is None:
        return [(None, "`rate_limit` limits nothing: give `per_second`, `concurrency` or both")]
    return []


def parse_rate_limit(raw: Any) -> RateLimit | None:
    """The block as the worker enforces it; None when absent or invalid."""
    if raw is None or rate_limit_problems(raw):
        return None
    per_second = raw.get("per_second")
    burst = raw.get("burst")
    return RateLimit(
        key=str(raw["key"]),
        per_second=per_second
        if per_second is None or is_template(per_second)
        else float(per_second),
        burst=1 if burst is None else burst,
        concurrency=raw.get("concurrency"),
    )


def resolve(limit: RateLimit, render: Callable[[str, str], Any]) -> Resolved:
    """The block's numbers for one command; `render(template, field)` renders a
    templated one. Raises ValueError (a one-line message naming the field) for a value
    that renders to no usable number."""
    per_second = _resolved(limit.per_second, "per_second", render, whole=False)
    burst = _resolved(limit.burst, "burst", render, whole=True)
    concurrency = _resolved(limit.concurrency, "concurrency", render, whole=True)
    return Resolved(
        per_second=per_second,
        burst=1 if burst is None else int(burst),
        concurrency=None if concurrency is None else int(concurrency),
    )


def _resolved(
    value: Any, name: str, render: Callable[[str, str], Any], *, whole: bool
) -> float | None:
    if value is None:
        return None
    written = value
    if is_template(value):
        value = render(value, name)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value) if not whole else int(value.strip())
    number = _number(value)
    good = number is not None and math.isfinite(number) and number > 0
    if whole:
        good = good and number is not None and number >= 1 and float(number).is_integer()
    if not good:
        wanted = "a whole number of 1 or more" if whole else "a number above 0"
        raise ValueError(
            f"`rate_limit.{name}` {written!r} rendered {value!r} for this item; it must be {wanted}"
        )
    assert number is not None
    return number


def rendered_key_problem(rendered: Any, template: str) -> str | None:
    """Why a key as rendered for one command cannot name a limit (None: it can)."""
    text = "" if rendered is None else str(rendered).strip()
    if not text:
        return (
            f"`rate_limit.key` {template!r} rendered empty for this item; the limit needs "
            "a key (check the value it reads)"
        )
    if len(text) > MAX_KEY_LENGTH:
        return (
            f"`rate_limit.key` {template!r} rendered to more than {MAX_KEY_LENGTH} "
            "characters; key the limit by something shorter"
        )
    return None
