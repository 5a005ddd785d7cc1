"""models.python_code: NoETL's top-level `return` compiled as the body of a function."""

from __future__ import annotations

import ast
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from noetl_celery.models.python_code import (
    cached_step_code,
    compile_step_code,
    has_top_level_return,
)


def run(code: str, **inputs: Any) -> dict[str, Any]:
    namespace: dict[str, Any] = {"args": dict(inputs), "input_data": dict(inputs), **inputs}
    exec(compile_step_code(code, "<test>"), namespace)
    return namespace


@pytest.mark.parametrize(
    ("code", "found"),
    [
        ("return 1", True),
        ("x = 1\nreturn x", True),
        ("if x:\n    return 1\nresult = 2", True),  # NoETL's scan misses this one
        ("for i in y:\n    return i", True),
        ("try:\n    pass\nfinally:\n    return 3", True),
        ("def main():\n    return 1", False),
        ("async def main():\n    return 1", False),
        ("class A:\n    def f(self):\n        return 1", False),
        ("f = lambda: 1\nresult = f()", False),
        ("result = 1", False),
    ],
)
def test_finds_a_module_level_return(code: str, found: bool) -> None:
    assert has_top_level_return(ast.parse(code)) is found


@pytest.mark.parametrize(
    ("code", "inputs", "result"),
    [
        ("return input_data['a'] + 1", {"a": 1}, 2),
        ("return args['a'] * 2", {"a": 3}, 6),
        ("total = a + b\nreturn {'total': total}", {"a": 1, "b": 2}, {"total": 3}),
        ("if a:\n    return 'yes'\nreturn 'no'", {"a": 0}, "no"),
        ("x = 1\nreturn", {}, None),
        ('"""doc"""\nfrom __future__ import annotations\nreturn 5', {}, 5),
        ("s = '''\nkeep\n'''\nreturn s", {}, "\nkeep\n"),  # strings are not re-indented
    ],
)
def test_returned_value_is_the_result(code: str, inputs: dict[str, Any], result: Any) -> None:
    assert run(code, **inputs)["result"] == result


def test_without_a_return_the_code_is_unchanged() -> None:
    namespace = run("result = {'x': 1}\ndef main():\n    return 2")
    assert namespace["result"] == {"x": 1} and callable(namespace["main"])


def test_line_numbers_are_the_users() -> None:
    with pytest.raises(ZeroDivisionError) as caught:
        run("x = 0\ny = 1\nreturn y / x")
    assert caught.traceback[-1].lineno + 1 == 3  # pytest counts from 0


def test_a_return_in_a_class_body_is_still_a_syntax_error() -> None:
    with pytest.raises(SyntaxError, match="'return' outside function"):
        compile_step_code("class A:\n    return 1", "<test>")


def test_parses_run_one_at_a_time_and_each_source_compiles_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CPython 3.11's AST conversion miscounts when two threads parse at once (gh-106905)
    inside, most, calls = [0], [0], [0]
    parse = ast.parse

    def slow_parse(source: str, *args: Any, **kwargs: Any) -> Any:
        if args[:1] == ("<parallel>",):  # a step's source (not the wrapper's)
            inside[0] += 1
            calls[0] += 1
            most[0] = max(most[0], inside[0])
            time.sleep(0.01)  # another thread would get in here
            inside[0] -= 1
        return parse(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", slow_parse)  # the module python_code calls
    sources = [f"x = {i}\nreturn x" for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda s: cached_step_code(s, "<parallel>"), sources))
        codes += pool.map(lambda s: cached_step_code(s, "<parallel>"), sources)
    assert most[0] == 1
    assert calls[0] == 8  # the second round came from the cache
    assert codes[:8] == codes[8:]
    for i, code in enumerate(codes[:8]):
        namespace: dict[str, Any] = {"args": {}, "input_data": None}
        exec(code, namespace)
        assert namespace["result"] == i


def test_validation_compiles_each_time_and_so_warns_each_time() -> None:
    source = "x = 1\nif x is 1:\n    pass\n"  # SyntaxWarning: "is" with a literal
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compile_step_code(source, "<warned>")
        assert [type(w.message) for w in caught] == [SyntaxWarning]
