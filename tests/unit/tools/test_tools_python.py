from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest

from noetl_celery.errors import ToolError
from noetl_celery.tools.base import ToolOutcome

RunTool = Callable[..., ToolOutcome]


def test_main_gets_arguments_by_name(run_tool: RunTool) -> None:
    code = (
        "def main(a, b, from_ctx_input, from_ctx, context, missing='dflt', **rest):\n"
        "    return {'a': a, 'b': b, 'ci': from_ctx_input, 'c': from_ctx,\n"
        "            'has_ctx': 'workload' in context, 'missing': missing, 'rest': rest}\n"
    )
    out = run_tool(
        "python",
        {"code": code},
        input={"a": 1, "b": [2], "extra": "x"},
        context={
            "input": {"from_ctx_input": "ci", "a": "ignored"},
            "from_ctx": "c",
            "workload": {},
        },
    )
    assert out.ok, out.error
    assert out.data == {
        "a": 1,
        "b": [2],
        "ci": "ci",
        "c": "c",
        "has_ctx": True,
        "missing": "dflt",
        "rest": {"extra": "x"},
    }


def test_input_keys_and_context_are_globals(run_tool: RunTool) -> None:
    code = "result = {'n': n * 2, 'run': context['execution_id'], 'x': get_val(doc, 'a.b.1')}"
    out = run_tool(
        "python",
        {"code": code},
        input={"n": 21, "doc": {"a": {"b": [0, 9]}}},
        context={"execution_id": "e-9"},
    )
    assert out.data == {"n": 42, "run": "e-9", "x": 9}


def test_helpers_are_available(run_tool: RunTool) -> None:
    code = (
        "merged = deep_merge({'a': {'x': 1, 'y': 1}}, {'a': {'y': 2}, 'b': 3})\n"
        "result = {'merged': merged, 'now': now_utc(), 'tz': now_utc().tzinfo is not None,\n"
        "          'id': uuid.uuid4(), 'js': json.dumps([1]), 'sep': os.sep,\n"
        "          'missing': get_val({'a': 1}, 'a.b', 'd'),\n"
        "          'ser': make_serializable({'d': datetime.date(2024, 1, 2)})}\n"
    )
    out = run_tool("python", {"code": code})
    assert out.ok, out.error
    assert out.data["merged"] == {"a": {"x": 1, "y": 2}, "b": 3}
    assert out.data["tz"] is True and out.data["missing"] == "d"
    assert out.data["ser"] == {"d": "2024-01-02"}
    assert isinstance(out.data["now"], str) and isinstance(out.data["id"], str)


def test_result_without_main_and_status_not_interpreted(run_tool: RunTool) -> None:
    out = run_tool("python", {"code": "result = {'status': 'failed', 'why': 'assertion'}"})
    assert out.ok  # the runner, not the tool, reads `status`
    assert out.data == {"status": "failed", "why": "assertion"}


def test_no_result_gives_a_summary(run_tool: RunTool) -> None:
    code = "import math\nzeta = 1\nalpha = 2\ndef helper():\n    pass\nclass K:\n    pass\n"
    out = run_tool("python", {"code": code}, input={"given": 1})
    assert out.data == {
        "status": "success",
        "message": "python code ran without a result",
        "locals_keys": ["alpha", "zeta"],
    }


def test_async_main_is_awaited(run_tool: RunTool) -> None:
    code = "import asyncio\nasync def main(x):\n    await asyncio.sleep(0)\n    return x + 1\n"
    out = run_tool("python", {"code": code}, input={"x": 1})
    assert out.ok and out.data == 2


def test_exception_becomes_python_error(run_tool: RunTool) -> None:
    code = "def main():\n    values = {}\n    return values['nope']\n"
    out = run_tool("python", {"code": code})
    assert not out.ok and out.error is not None
    assert out.error.kind == "python_error"
    assert out.error.message == "KeyError: 'nope' (line 3: return values['nope'])"
    assert out.error.retryable is False
    py = out.detail["py"]
    assert py["exception"] == "KeyError"
    assert "line 3, in main" in py["traceback"] and "values['nope']" in py["traceback"]
    assert "python_tool.py" not in py["traceback"]  # the tool's own frames are dropped


def test_assert_without_message_names_the_line(run_tool: RunTool) -> None:
    out = run_tool("python", {"code": "x = 1\nassert x == 2\n"})
    assert out.error is not None and out.error.kind == "python_error"
    assert out.error.message == "AssertionError (line 2: assert x == 2)"
    out = run_tool("python", {"code": "assert False, 'rows missing'"})
    assert out.error is not None
    assert (
        out.error.message == "AssertionError: rows missing (line 1: assert False, 'rows missing')"
    )


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            "class A:\n    return 1\n",
            "SyntaxError: 'return' outside function (line 2: return 1)",
        ),
        ("def main(:\n  pass\n", "SyntaxError: invalid syntax (line 1: def main(:)"),
    ],
)
def test_syntax_error(run_tool: RunTool, code: str, message: str) -> None:
    out = run_tool("python", {"code": code})
    assert out.error is not None and out.error.kind == "syntax_error"
    assert out.error.message == message
    assert out.detail["py"]["exception"] == "SyntaxError"


LONG = "values = [" + ", ".join(str(i) for i in range(60)) + "]; 1 / 0"

# (code, input, the step's error message): the line is the deepest one of the user's code
FAILING_LINES = {
    "main": (
        "def main(x):\n    y = 2\n    return 1 / x\n",
        {"x": 0},
        "ZeroDivisionError: division by zero (line 3: return 1 / x)",
    ),
    "helper below main": (
        "def check(v):\n    if v < 0:\n        raise ValueError(f'negative: {v}')\n"
        "def main(v):\n    check(v)\n",
        {"v": -1},
        "ValueError: negative: -1 (line 3: raise ValueError(f'negative: {v}'))",
    ),
    "inside a library": (
        "import json\nrows = 1\ndata = json.loads('{')\n",
        {},
        "JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1) (line 3: data = json.loads('{'))",
    ),
    "module level, indented block": (
        "total = 0\nfor i in range(3):\n    total += {}['k']\n",
        {},
        "KeyError: 'k' (line 3: total += {}['k'])",
    ),
    "long line is cut": (LONG, {}, f"ZeroDivisionError: division by zero (line 1: {LONG[:119]}…)"),
}


@pytest.mark.parametrize("name", sorted(FAILING_LINES))
def test_python_error_names_the_failing_line(run_tool: RunTool, name: str) -> None:
    code, input_, message = FAILING_LINES[name]
    out = run_tool("python", {"code": code}, input=input_)
    assert out.error is not None and out.error.kind == "python_error"
    assert out.error.message == message


def test_the_quoted_line_is_redacted(run_tool: RunTool, unit_secret: str) -> None:
    out = run_tool("python", {"code": f"password = '{unit_secret}'; 1 / 0\n"})
    assert out.error is not None
    assert out.error.message == (
        "ZeroDivisionError: division by zero (line 1: password = ***; 1 / 0)"
    )


def test_sys_exit_does_not_end_the_worker(run_tool: RunTool) -> None:
    out = run_tool("python", {"code": "import sys\nsys.exit(3)"})
    assert out.error is not None and out.error.message == "SystemExit: 3 (line 2: sys.exit(3))"


def test_secrets_are_redacted_from_message_and_traceback(
    run_tool: RunTool, unit_secret: str
) -> None:
    code = "def main(pw):\n    raise ValueError('login failed with ' + pw)\n"
    out = run_tool("python", {"code": code}, input={"pw": unit_secret})
    assert out.error is not None
    assert unit_secret not in out.error.message and "***" in out.error.message
    assert unit_secret not in out.detail["py"]["traceback"]


def test_print_goes_to_stderr(run_tool: RunTool, capfd: pytest.CaptureFixture[str]) -> None:
    out = run_tool(
        "python", {"code": "print('hello from step')\nprint('x', file=None)\nresult = 1"}
    )
    assert out.ok
    captured = capfd.readouterr()
    assert captured.out == ""
    assert "hello from step" in captured.err


def test_code_b64(run_tool: RunTool) -> None:
    encoded = base64.b64encode(b"result = 'decoded'").decode()
    assert run_tool("python", {"code_b64": encoded}).data == "decoded"
    assert run_tool("python", {"code_base64": encoded}).data == "decoded"


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({}, "needs `code`"),
        ({"code_b64": "!!!not base64"}, "not valid base64"),
    ],
)
def test_config_errors(run_tool: RunTool, config: dict[str, object], needle: str) -> None:
    out = run_tool("python", config)
    assert out.error is not None and out.error.kind == "config_error"
    assert needle in out.error.message


def test_libs(run_tool: RunTool) -> None:
    code = (
        "result = {'pi': round(m.pi, 2), 'od': list(OD([('a', 1)]).items()),\n"
        "          'p': pp.join('a', 'b')}"
    )
    libs = {
        "m": "math",
        "OD": {"from": "collections", "import": "OrderedDict"},
        "pp": {"from": "os", "import": "path"},
    }
    out = run_tool("python", {"code": code, "libs": libs})
    assert out.ok, out.error
    assert out.data == {"pi": 3.14, "od": [["a", 1]], "p": "a/b"}


def test_missing_lib_is_a_config_error(run_tool: RunTool) -> None:
    out = run_tool("python", {"code": "result = 1", "libs": {"x": "no_such_module_xyz"}})
    assert out.error is not None and out.error.kind == "config_error"
    assert "no_such_module_xyz" in out.error.message


def test_list_form_libs_are_ignored(run_tool: RunTool) -> None:
    assert run_tool("python", {"code": "result = 5", "libs": ["math"]}).data == 5


def test_result_is_made_json_serialisable(run_tool: RunTool) -> None:
    code = (
        "import decimal\n"
        "class Thing:\n    def __str__(self):\n        return 'thing'\n"
        "result = {'dt': datetime.datetime(2024, 1, 2, 3, 4, 5), 'd': datetime.date(2024, 1, 2),\n"
        "          't': datetime.time(1, 2), 'i': decimal.Decimal('10.0'),\n"
        "          'f': decimal.Decimal('1.5'),\n"
        "          's': {3, 1, 2}, 'tu': (1, 2), 'b': b'hi', 'bin': b'\\xff\\x00',\n"
        "          'u': uuid.UUID(int=1), 'o': Thing(), 1: 'int key'}\n"
    )
    out = run_tool("python", {"code": code})
    assert out.ok, out.error
    assert out.data == {
        "dt": "2024-01-02T03:04:05",
        "d": "2024-01-02",
        "t": "01:02:00",
        "i": 10,
        "f": 1.5,
        "s": [1, 2, 3],
        "tu": [1, 2],
        "b": "hi",
        "bin": "/wA=",
        "u": "00000000-0000-0000-0000-000000000001",
        "o": "thing",
        "1": "int key",
    }
    json.dumps(out.data)


def test_main_guard_does_not_run(run_tool: RunTool) -> None:
    code = (
        "calls = []\n"
        "def main():\n    calls.append(1)\n    return len(calls)\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    assert run_tool("python", {"code": code}).data == 1


@pytest.mark.parametrize("on_thread", [False, True], ids=["main-thread", "worker-thread"])
def test_timeout_fails_the_call_on_time(run_tool: RunTool, on_thread: bool) -> None:
    import threading
    import time

    code = "import time\nwhile True:\n    time.sleep(0.01)\n"
    box: list[ToolOutcome] = []
    started = time.monotonic()
    if on_thread:  # the embedded default runs tools on threads: no signals there
        thread = threading.Thread(
            target=lambda: box.append(run_tool("python", {"code": code, "timeout": 0.3}))
        )
        thread.start()
        thread.join(5)
    else:  # a prefork worker child runs tasks on its main thread
        box.append(run_tool("python", {"code": code, "timeout": 0.3}))
    elapsed = time.monotonic() - started
    out = box[0]
    assert not out.ok and out.error is not None
    assert out.error.kind == "timeout"
    assert "timeout of 0.3s" in out.error.message
    assert elapsed < 3


def test_code_within_its_timeout_returns_normally(run_tool: RunTool) -> None:
    out = run_tool("python", {"code": "result = {'x': 1}", "timeout": 5})
    assert out.ok and out.data == {"x": 1}


@pytest.mark.parametrize("timeout", ["300ms", "0.3s", {"timeout": "300ms"}])
def test_timeout_as_a_duration_string(run_tool: RunTool, timeout: object) -> None:
    config: dict[str, object] = {"code": "import time\nwhile True:\n    time.sleep(0.01)\n"}
    config["spec" if isinstance(timeout, dict) else "timeout"] = timeout
    out = run_tool("python", config)
    assert out.error is not None and out.error.kind == "timeout"
    assert "timeout of 0.3s" in out.error.message


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"timeout": "30x"}, "tool.timeout: '30x' is not a duration"),
        ({"spec": {"timeout": "soon"}}, "tool.spec.timeout: 'soon' is not a duration"),
    ],
)
def test_a_timeout_that_is_no_duration_names_the_field(
    run_tool: RunTool, config: dict[str, object], message: str
) -> None:
    with pytest.raises(ToolError, match=message):
        run_tool("python", {"code": "result = 1", **config})


# NoETL's python forms (noetl/tools src/tools/python.rs): `input_data` is a copy of the
# step's input, `args` the input itself, and code ending in a top-level `return` returns
# the result; the older forms keep their meaning.
NOETL_FORMS = [
    ("return {'sum': input_data['a'] + input_data.get('b', 0)}", {"a": 1, "b": 2}, {"sum": 3}),
    ("x = input_data.get('missing', 7)\nreturn x", {}, 7),
    ("result = {'n': input_data['n'], 'same': input_data == args}", {"n": 4}, {"n": 4, "same": 1}),
    ("if n > 1:\n    return 'many'\nreturn 'one'", {"n": 2}, "many"),
    ("rows = [r * 2 for r in input_data['rows']]\nreturn rows", {"rows": [1, 2]}, [2, 4]),
    ("return", {}, None),
    ("def main(n):\n    return n + 1\n", {"n": 1}, 2),
    ("result = n * 3", {"n": 2}, 6),
    # NoETL's text scan stops at the `def` and leaves this a SyntaxError: wrapped here
    ("def double(v):\n    return v * 2\nreturn double(n)", {"n": 2}, 4),
]


@pytest.mark.parametrize(("code", "given", "expected"), NOETL_FORMS)
def test_noetl_python_forms(
    run_tool: RunTool, code: str, given: dict[str, object], expected: object
) -> None:
    out = run_tool("python", {"code": code}, input=given)
    assert out.ok, out.error
    assert out.data == expected


def test_input_data_is_a_copy_of_the_input(run_tool: RunTool) -> None:
    code = "input_data['x'] = 9\nreturn {'x': x, 'id': input_data, 'args': args}"
    out = run_tool("python", {"code": code}, input={"x": 1})
    assert out.ok, out.error
    assert out.data == {"x": 1, "id": {"x": 9}, "args": {"x": 1}}


def test_an_input_key_named_input_data_or_args_wins(run_tool: RunTool) -> None:
    """NoETL's own fixtures pass `input: {input_data: ...}` and read the value back."""
    code = "return {'id': input_data, 'args': args}"
    given = {"input_data": {"name": "Ada"}, "args": [1, 2]}
    out = run_tool("python", {"code": code}, input=given)
    assert out.ok, out.error
    assert out.data == {"id": {"name": "Ada"}, "args": [1, 2]}


def test_a_failure_after_a_top_level_return_form_names_the_users_line(
    run_tool: RunTool,
) -> None:
    out = run_tool("python", {"code": "x = 0\nreturn 1 / x\n"})
    assert out.error is not None and out.error.kind == "python_error"
    assert out.error.message == "ZeroDivisionError: division by zero (line 2: return 1 / x)"
