"""`models.outcome`: the typed outcome and error, their invariant, and their JSON, which
must read every shape stored before and write exactly the shape stored today."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

import noetl_celery
from noetl_celery.models.outcome import ERROR_KINDS, Outcome, StepError, output_view
from noetl_celery.tools.base import ToolOutcome

HTTP_ERROR = {
    "kind": "rate_limit",
    "message": "HTTP 429: Too Many Requests",
    "retryable": True,
    "code": "HTTP_429",
    "status_code": 429,
    "retry_after": 7,
}

# terminal event payloads as the engine has written them (key order included)
STORED: list[dict[str, Any]] = [
    # an old row: written before `meta` and `detail` existed
    {"status": "ok", "result": {"rows": [[1]]}, "error": None},
    # a single tool step, iteration scope kept for `set`
    {
        "status": "ok",
        "result": {"status_code": 200, "data": {"a": 1}},
        "error": None,
        "iter": {"item": 3},
        "detail": {"http": {"status": 200, "headers": {}}},
        "meta": {"duration_ms": 1.5, "attempt": 1},
    },
    # a pipeline stopped by `break`, ctx written by a policy, empty iteration scope
    {
        "status": "break",
        "result": {"data": None, "status": "break"},
        "error": None,
        "ctx": {"page": 2},
        "iter": {},
        "meta": {"runs": 1, "jumps": 0, "last_task": "a"},
    },
    {"status": "error", "result": {"status_code": 429}, "error": HTTP_ERROR},
    {
        "status": "error",
        "result": None,
        "error": {
            "kind": "db_error",
            "message": 'relation "x" does not exist',
            "retryable": False,
            "code": "42P01",
        },
        "detail": {"pg": {"code": "42P01", "sqlstate": "42P01"}},
    },
    {
        "status": "error",
        "result": None,
        "error": {
            "kind": "db_error",
            "message": "Catalog Error",
            "retryable": False,
            "exception": "CatalogException",
        },
    },
    # the engine's own crash, with the traceback
    {
        "status": "error",
        "result": None,
        "error": {"kind": "engine_error", "message": "KeyError: 'x'", "traceback": "..."},
    },
    # a pipeline retry that gave up
    {
        "status": "error",
        "result": {"status": "failed"},
        "error": {**HTTP_ERROR, "message": "HTTP 429 (gave up after 3 attempts)", "attempts": 3},
    },
    # the reaper giving a lost command up
    {
        "status": "error",
        "result": None,
        "error": {"kind": "worker_lost", "message": "lost", "retryable": False},
    },
    # errors the engine writes without `retryable`
    {"status": "error", "result": None, "error": {"kind": "template_error", "message": "x"}},
    {"status": "error", "result": None, "error": {"kind": "cancelled", "message": "stopped"}},
    # a key no field names (an older version's) is kept
    {
        "status": "error",
        "result": None,
        "error": {"kind": "python_error", "message": "m", "retryable": False, "hint": "h"},
    },
]


@pytest.mark.parametrize("stored", STORED, ids=lambda s: f"{s['status']}")
def test_every_stored_shape_round_trips_byte_for_byte(stored: dict[str, Any]) -> None:
    outcome = Outcome.from_json(stored)
    assert json.dumps(outcome.to_json()) == json.dumps(stored)
    assert outcome.ok is (stored["status"] != "error")
    assert (outcome.error is None) is (stored["error"] is None)


def test_the_stored_error_reads_as_fields() -> None:
    error = Outcome.from_json(STORED[3]).error
    assert error == StepError(
        "rate_limit",
        "HTTP 429: Too Many Requests",
        True,
        code="HTTP_429",
        status_code=429,
        retry_after=7,
    )


@pytest.mark.parametrize(
    ("status", "error"),
    [
        ("error", None),
        ("ok", StepError("db_error", "x")),
        ("break", StepError("policy", "x")),
    ],
)
def test_an_error_exactly_when_the_status_says_so(status: Any, error: StepError | None) -> None:
    with pytest.raises(ValueError, match="exactly when"):
        Outcome(status, None, error)


def test_an_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="status"):
        Outcome("failed", None, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown status"):
        Outcome.from_json({"status": "weird", "result": None, "error": None})


def test_a_tool_failure_stores_the_shape_it_always_had() -> None:
    out = ToolOutcome.failure(
        "rate_limit",
        "HTTP 429: Too Many Requests",
        retryable=True,
        code="HTTP_429",
        status_code=429,
        retry_after=7,
    )
    assert out.error is not None
    assert list(out.error.to_json().items()) == list(HTTP_ERROR.items())
    # optional fields left out are absent, not null (templates test them with `is defined`)
    plain = ToolOutcome.failure("config_error", "no sql")
    assert plain.error is not None
    expected = {"kind": "config_error", "message": "no sql", "retryable": False}
    assert plain.error.to_json() == expected


def test_output_view_shows_the_error_as_json() -> None:
    outcome = Outcome.from_json({**STORED[4], "meta": {"attempt": 2}})
    view = output_view(outcome)
    assert view["status"] == "error"
    assert view["error"] == STORED[4]["error"]
    assert view["pg"] == {"code": "42P01", "sqlstate": "42P01"}
    assert view["meta"] == {"attempt": 2}
    assert output_view(Outcome.from_json(STORED[2]))["status"] == "ok"  # break is not an error


# ---- every kind the package emits is an ErrorKind ------------------------------------------

PACKAGE = Path(noetl_celery.__file__).parent
# call names whose (positional index) argument is an error kind
KIND_ARGUMENTS = {
    "failure": 0,  # ToolOutcome.failure
    "StepError": 0,
    "CursorError": 0,
    "ScriptFetchError": 0,
    "KeychainError": 1,
    "give_up": 1,
    "_give_up": 1,
}
# `run --json`'s error list (cli/) also says why a run never started (`invalid`): a view
# of the run, not an error a command or step carries; templating's `kind` names what
# was undefined (a variable or an attribute); validation's is the DSL's tool kind
NOT_OUTCOMES = ("cli/", "templating/", "models/validation")


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _first_string(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Tuple) and node.elts:
        node = node.elts[0]
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _kinds_in(tree: ast.AST) -> set[str]:
    found: set[str | None] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            index = KIND_ARGUMENTS.get(_call_name(node) or "")
            if index is not None and len(node.args) > index:
                found.add(_first_string(node.args[index]))
            found.update(_first_string(k.value) for k in node.keywords if k.arg == "kind")
        elif isinstance(node, ast.Dict):
            keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
            if "kind" in keys and "message" in keys:  # an error written as a dict
                found.add(_first_string(node.values[keys.index("kind")]))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            # functions typed to return a kind (sqlstate_kind, a stop check, ...)
            if node.returns is not None and "ErrorKind" in ast.unparse(node.returns):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Return):
                        found.add(_first_string(sub.value))
            # `kind = "..."` in a function body (a class's `kind` is a tool's DSL kind)
            for sub in ast.walk(node):
                if isinstance(sub, ast.Assign | ast.AnnAssign):
                    found.update(_assigned_kinds(sub))
    return {k for k in found if k is not None}


def _assigned_kinds(node: ast.Assign | ast.AnnAssign) -> list[str | None]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if node.value is None or "kind" not in [t.id for t in targets if isinstance(t, ast.Name)]:
        return []
    value = node.value
    options = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
    return [_first_string(v) for v in options]


def test_every_error_kind_the_package_emits_is_an_error_kind() -> None:
    emitted: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(NOT_OUTCOMES):
            continue
        for kind in _kinds_in(ast.parse(path.read_text(), rel)):
            emitted.setdefault(kind, []).append(rel)
    unknown = {k: v for k, v in emitted.items() if k not in ERROR_KINDS}
    assert not unknown, f"error kinds missing from models.outcome.ErrorKind: {unknown}"
    # and the list holds no kind nothing emits (the scan sees every producer)
    assert set(ERROR_KINDS) <= set(emitted), set(ERROR_KINDS) - set(emitted)


def test_the_scan_catches_a_kind_not_listed() -> None:
    source = 'def f():\n    return ToolOutcome.failure("http_error", "boom")\n'
    assert _kinds_in(ast.parse(source)) == {"http_error"}
    assert "http_error" not in ERROR_KINDS


def test_a_stored_error_without_a_kind_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="without a kind"):
        Outcome.from_json({"status": "error", "result": None, "error": {"message": "m"}})
