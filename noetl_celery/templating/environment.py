"""The one Jinja2 environment every template is rendered with.

Sandboxed (playbooks are data, not trusted code), strict about undefined names (a typo
must fail loudly, NoETL silently kept the raw `{{ ... }}` text), and dict-friendly:
`{{ row.items }}` reads the key `items` before the dict method of that name.

An HTTP result is an envelope `{status_code, headers, url, elapsed, data: body}`. Playbooks
written against a step-level HTTP result (where NoETL shows the body as `output.data`)
read body fields straight off the envelope: `output.data.meta.page` inside a pipeline,
where the body is at `output.data.data`. Where strict rendering would fail on such a name,
it is read from the body instead (the envelope's own keys always win), so those playbooks
paginate as their authors meant rather than stopping at page 1 as they do in NoETL.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import difflib
import json
import uuid
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, Template, UndefinedError, nodes
from jinja2.exceptions import SecurityError, TemplateRuntimeError
from jinja2.nodes import Template as TemplateNode
from jinja2.runtime import Undefined
from jinja2.sandbox import SandboxedEnvironment
from jinja2.utils import missing, pass_context


class UndefinedNameError(UndefinedError):
    """Raised for an undefined name or attribute; remembers which one.

    `message` is in user terms (`a step result has no field 'stat'; did you mean
    'stats'?`), never Jinja's `'...ResultView object' has no attribute`; `in_template`
    adds the expression that held the missing field when the template shows it."""

    def __init__(self, message: str, name: Any, is_attribute: bool, owner: Any = missing) -> None:
        super().__init__(message)
        self.name = name
        self.is_attribute = is_attribute
        self.owner = owner

    def in_template(self, source: str) -> str:
        """The message naming the expression whose field is missing (`'fetch' (a step
        result) has no field 'stat'`) when `source` shows it unambiguously."""
        if not self.is_attribute or self.owner is missing or self._hinted:
            return str(self.message)
        subject = _owner_expression(source, self.name)
        return missing_field_message(self.owner, self.name, subject)

    @property
    def _hinted(self) -> bool:
        return self.message != missing_field_message(self.owner, self.name, None)


def _kind(value: Any) -> str:
    from noetl_celery.templating.result_view import ResultView  # no import cycle at load

    if isinstance(value, Mapping) and _ENVELOPE_KEY in value:
        return "an HTTP result"
    if isinstance(value, ResultView):
        return "a step result"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple | range):
        return f"a list of {len(value)} item{'' if len(value) == 1 else 's'}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float | decimal.Decimal):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return f"a value of type {type(value).__name__}"


_LISTED_FIELDS = 12  # fields named when none is close to the missing one


def missing_field_message(owner: Any, name: Any, subject: str | None) -> str:
    """`'fetch' (a step result) has no field 'stat'; did you mean 'stats'?`, or without
    a subject `a step result has no field ...`."""
    kind = _kind(owner)
    head = f"{subject!r} ({kind})" if subject else kind
    if not isinstance(name, str):
        return f"{head} has no element {name!r}"
    message = f"{head} has no field {name!r}"
    if not isinstance(owner, Mapping):
        return message
    keys = [str(k) for k in owner]
    body = owner.get("data") if _ENVELOPE_KEY in owner else None
    if isinstance(body, Mapping):
        keys += [str(k) for k in body if k not in owner]
    close = difflib.get_close_matches(name, keys, n=3, cutoff=0.6)
    if close:
        return f"{message}; did you mean {' or '.join(repr(k) for k in close)}?"
    if not keys:
        return f"{message} (it is empty)"
    shown = ", ".join(sorted(keys)[:_LISTED_FIELDS])
    more = f", ... ({len(keys)} in all)" if len(keys) > _LISTED_FIELDS else ""
    return f"{message} (its fields: {shown}{more})"


def _expression_text(node: nodes.Node) -> str | None:
    """`fetch.rows[0]` for a chain of names, attributes and constant subscripts."""
    if isinstance(node, nodes.Name):
        return node.name
    if isinstance(node, nodes.Getattr):
        base = _expression_text(node.node)
        return None if base is None else f"{base}.{node.attr}"
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        base = _expression_text(node.node)
        key = node.arg.value
        if base is None or not isinstance(key, str | int):
            return None
        if isinstance(key, str) and key.isidentifier():
            return f"{base}.{key}"
        return f"{base}[{key!r}]"
    return None


def _owner_expression(source: str, name: Any) -> str | None:
    """The expression in `source` whose field `name` was read, if only one could be."""
    try:
        tree = ENV.parse(source)
    except Exception:  # a fragment (python code placeholders are parsed by their caller)
        return None
    found: set[str | None] = set()
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        key: Any = missing
        if isinstance(node, nodes.Getattr):
            key = node.attr
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
            key = node.arg.value
        if key is not missing and key == name:
            found.add(_expression_text(node.node))  # type: ignore[attr-defined]
    return found.pop() if len(found) == 1 else None


class NoetlUndefined(StrictUndefined):
    """StrictUndefined that tells a missing top-level name from a missing attribute.

    Arc guards treat a missing attribute (data-dependent) as false but a missing name
    (a typo in the playbook) as an error. Its messages speak of fields of step results
    and mappings, not of Jinja's or the engine's classes.
    """

    __slots__ = ()

    def _fail_with_undefined_error(self, *args: Any, **kwargs: Any) -> Any:
        is_attribute = self._undefined_obj is not missing
        if self._undefined_hint and is_attribute:
            # the sandbox's `access to attribute '__class__' of 'ResultView' object is
            # unsafe`: what the object is, not the engine's class name
            owner = f"'{type(self._undefined_obj).__name__}' object"
            message = self._undefined_hint.replace(owner, _kind(self._undefined_obj))
        elif self._undefined_hint or not is_attribute:
            message = self._undefined_message
        else:
            message = missing_field_message(self._undefined_obj, self._undefined_name, None)
        raise UndefinedNameError(message, self._undefined_name, is_attribute, self._undefined_obj)


# Rebind every operator StrictUndefined fails on to the override above (the base class
# bound them to its own function object at class creation time).
_OPERATORS = (
    "__iter__",
    "__str__",
    "__len__",
    "__eq__",
    "__ne__",
    "__bool__",
    "__hash__",
    "__contains__",
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__truediv__",
    "__rtruediv__",
    "__floordiv__",
    "__rfloordiv__",
    "__mod__",
    "__rmod__",
    "__pos__",
    "__neg__",
    "__call__",
    "__getitem__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__int__",
    "__index__",  # range(n), a list index: "'n' is undefined", not a TypeError
    "__abs__",
    "__round__",
    "__trunc__",
    "__floor__",
    "__ceil__",
    "__float__",
    "__complex__",
    "__pow__",
    "__rpow__",
)
for _name in _OPERATORS:
    setattr(NoetlUndefined, _name, NoetlUndefined._fail_with_undefined_error)


def json_default(value: Any) -> Any:
    """JSON encoding for values that appear in results (dates, decimals, uuids, sets)."""
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, Undefined):
        value._fail_with_undefined_error()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _tojson(value: Any, indent: int | None = None) -> str:
    # Unlike Jinja's own tojson this does not HTML-escape: the output goes into SQL/JSON.
    return json.dumps(value, default=json_default, indent=indent, ensure_ascii=False)


def _fromjson(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def _b64encode(value: Any) -> str:
    raw = value if isinstance(value, bytes) else str(value).encode()
    return base64.b64encode(raw).decode()


def _b64decode(value: Any) -> str:
    return base64.b64decode(str(value)).decode()


# the fields of a keychain entry that hold its token, in order of preference
_TOKEN_FIELDS = ("access_token", "token", "id_token")


@pass_context
def _token(context: Any, name: Any, audience: Any = None) -> str:
    """`token('<entry>')`: the token of keychain entry `<entry>` (its `access_token`).
    NoETL's `token(credential, audience)` asks a token provider; here the worker has
    resolved the playbook's `keychain` before rendering and this only reads it (no I/O
    in templates). `audience` is accepted for NoETL's signature and not used."""
    keychain = context.get("keychain")
    if not isinstance(keychain, Mapping):
        raise TemplateRuntimeError(
            f"token({name!r}): the playbook declares no `keychain` (or this template is "
            "rendered where keychain values are not available: only tool fields and input "
            "are rendered on the worker)"
        )
    entry = keychain.get(str(name))
    if not isinstance(entry, Mapping):
        known = ", ".join(sorted(str(k) for k in keychain)) or "none"
        raise TemplateRuntimeError(
            f"token({name!r}): no keychain entry '{name}' (entries: {known})"
        )
    for field in _TOKEN_FIELDS:
        value = entry.get(field)
        if isinstance(value, str) and value:
            return value
    raise TemplateRuntimeError(
        f"token({name!r}): keychain entry '{name}' holds no token "
        f"(one of {', '.join(_TOKEN_FIELDS)}); read its fields as keychain.{name}.<field>"
    )


_ENVELOPE_KEY = "status_code"  # what marks a mapping as an HTTP result envelope


def _body_field(obj: Mapping[str, Any], name: Any) -> Any:
    """`name` from the body of an HTTP envelope that lacks it, else `missing`."""
    if _ENVELOPE_KEY in obj and name not in obj:
        body = obj.get("data")
        if isinstance(body, Mapping) and name in body:
            return body[name]
    return missing


# What one `*` or `**` in a template may build: Jinja's sandbox stops attribute access,
# not arithmetic, and `{{ 'x' * 10**10 }}` would allocate 10 GB, `{{ 7 ** 10**7 }}` burn
# seconds of CPU in a worker. Far above what a playbook needs (a page size, an offset).
MAX_REPEAT_LENGTH = 10_000_000  # characters or items of a repeated string / list
MAX_POWER_BITS = 1_000_000  # bits of an integer power (about 300,000 digits)
# items of one `range()`: Jinja's sandbox stops at 100,000, and a loop over a million ids
# (`loop.in: "{{ range(n) | list }}"`) is the scale this engine is built for; ten million
# ints as a list is under 400 MB, the same bound as `*`
MAX_RANGE_ITEMS = MAX_REPEAT_LENGTH


class TemplateTooBig(SecurityError):
    """A template asked for a value past the sandbox's bounds."""


def _bounded_repeat(left: Any, right: Any) -> None:
    for seq, times in ((left, right), (right, left)):
        sized = isinstance(seq, str | bytes | list | tuple) and isinstance(times, int)
        if sized and len(seq) * times > MAX_REPEAT_LENGTH:
            raise TemplateTooBig(
                f"`*` would build {len(seq) * times:,} characters or items; a template "
                f"may build at most {MAX_REPEAT_LENGTH:,}"
            )


def _bounded_range(*args: int) -> range:
    """`range` up to MAX_RANGE_ITEMS items (the sandbox's own stops at 100,000)."""
    built = range(*args)
    if len(built) > MAX_RANGE_ITEMS:
        raise TemplateTooBig(
            f"range({', '.join(map(str, args))}) would have {len(built):,} items; a template "
            f"may build at most "
            f"{MAX_RANGE_ITEMS:,} (split the loop, or use a cursor loop over a table)"
        )
    return built


def _bounded_power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        bits = exponent * max(1, abs(base).bit_length() - 1)
        if abs(base) > 1 and bits > MAX_POWER_BITS:
            raise TemplateTooBig(
                f"`**` would compute a number of about {bits:,} bits; a template may "
                f"compute at most {MAX_POWER_BITS:,}"
            )


class NoetlEnvironment(SandboxedEnvironment):
    envelope_fallthrough = True
    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            _bounded_repeat(left, right)
        elif operator == "**":
            _bounded_power(left, right)
        return super().call_binop(context, operator, left, right)

    def getattr(self, obj: Any, attribute: str) -> Any:
        # Data first: for mappings a key wins over a method of the same name.
        if isinstance(obj, Mapping):
            if attribute in obj:
                return obj[attribute]
            ref = getattr(obj, "ref", None) if attribute == "_ref" else None
            if ref is not None:
                return ref  # a stored step result's reference (templating.result_view)
            if self.envelope_fallthrough and (found := _body_field(obj, attribute)) is not missing:
                return found
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        if (
            self.envelope_fallthrough
            and isinstance(obj, Mapping)
            and isinstance(argument, str)
            and (found := _body_field(obj, argument)) is not missing
        ):
            return found
        return super().getitem(obj, argument)


def _build(undefined: type[Undefined] = NoetlUndefined) -> NoetlEnvironment:
    env = NoetlEnvironment(undefined=undefined, autoescape=False, keep_trailing_newline=True)
    # NoETL mode renders exactly like NoETL, which has no such fallthrough
    env.envelope_fallthrough = undefined is NoetlUndefined
    env.filters.update(
        tojson=_tojson,
        to_json=_tojson,
        fromjson=_fromjson,
        from_json=_fromjson,
        b64encode=_b64encode,
        b64decode=_b64decode,
    )
    # `now()` is the wall clock where tools render (the worker); the orchestrator's
    # templates get the pass's time under that name instead (decide.Pass.context), so
    # the core stays a function of its inputs
    env.globals.update(
        now=lambda: _dt.datetime.now(_dt.UTC).isoformat(), token=_token, range=_bounded_range
    )
    return env


ENV = _build()
# NoETL's worker renders with Jinja's lenient Undefined (undefined -> "", len 0): only
# used when NOETL_TEMPLATE_MODE=noetl asks for NoETL's behaviour
LENIENT_ENV = _build(Undefined)


def _flat_globals(template: Template) -> Template:
    """The template with its globals as one plain dict. Jinja gives every template
    `ChainMap(its own, the environment's)`, and each render copies them into the new
    context key by key through the ChainMap: that copy was 60% of rendering a one-name
    expression such as `{{ iter.page }}` (issue 15). The environments' globals are set
    once, in `_build`, and templates here add none, so the flat copy is the same mapping."""
    template.globals = dict(template.globals)
    return template


@lru_cache(maxsize=8192)
def compile_template(source: str, lenient: bool = False) -> Any:
    return _flat_globals((LENIENT_ENV if lenient else ENV).from_string(source))


@lru_cache(maxsize=8192)
def compile_expression(source: str, lenient: bool = False) -> Any:
    expression = (LENIENT_ENV if lenient else ENV).compile_expression(
        source, undefined_to_none=False
    )
    _flat_globals(expression._template)
    return expression


def parse(source: str) -> TemplateNode:
    """Parse only (for syntax checks)."""
    return ENV.parse(source)
