"""Compiling a python step's code the way NoETL runs it.

NoETL's python tool (noetl/tools `src/tools/python.rs`, `wrap_top_level_return`) accepts
code that ends in a top-level `return`: it wraps the whole body in
`def __noetl_step__(args, input_data, **kw):` and sets `result` to what the call returns.
Plain Python refuses such code ("'return' outside function"), so validation and the
tool both compile through `compile_step_code`.

Differences from NoETL's text scan, on purpose: the syntax tree finds a `return` at
module level wherever it is (also under a top-level `if`/`for`/`try`), and the user's
line numbers are kept (NoETL indents the text, which also changes triple-quoted strings).
`from __future__` imports stay at module level, where Python requires them.
"""

from __future__ import annotations

import ast
import functools
import threading
from types import CodeType

# CPython 3.11 keeps the AST converters' recursion depth in interpreter-wide state: a
# parse whose conversion lets another thread in (a garbage collection running a
# finalizer) and a parse on that thread miscount each other, and one of them fails with
# "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905; the full
# suite hit it on a cursor frame's rows, which run in threads). So one parse at a time.
_AST_LOCK = threading.Lock()
STEP_FUNCTION = "__noetl_step__"
_WRAPPER = (
    f"def {STEP_FUNCTION}(args, input_data, **kw):\n"
    "    pass\n"
    f"result = {STEP_FUNCTION}(args, input_data)\n"
)


class _ModuleReturn(ast.NodeVisitor):
    """Finds a `return` outside any function or class body."""

    found = False

    def visit_Return(self, node: ast.Return) -> None:
        self.found = True

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        return  # a return in here belongs to the function

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        return

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        return

    def visit_Lambda(self, node: ast.Lambda) -> None:
        return


def has_top_level_return(tree: ast.Module) -> bool:
    finder = _ModuleReturn()
    for statement in tree.body:
        finder.visit(statement)
        if finder.found:
            return True
    return False


def _is_future_import(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.ImportFrom) and statement.module == "__future__"


def wrap_module_return(tree: ast.Module) -> ast.Module:
    """The module as NoETL runs it: its body inside `__noetl_step__(args, input_data)`,
    whose return value becomes `result`. Unchanged when no `return` is at module level."""
    if not has_top_level_return(tree):
        return tree
    body = list(tree.body)
    head: list[ast.stmt] = []
    while body and (
        _is_future_import(body[0])
        or (
            not head
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
            and len(body) > 1
            and _is_future_import(body[1])
        )
    ):
        head.append(body.pop(0))  # a docstring before `from __future__` stays with it
    wrapper = ast.parse(_WRAPPER)
    function, call = wrapper.body
    assert isinstance(function, ast.FunctionDef)
    function.body = body or [ast.Pass()]
    last = body[-1] if body else function
    ast.increment_lineno(call, (getattr(last, "end_lineno", None) or 1) - call.lineno + 1)
    tree.body = [*head, function, call]
    return ast.fix_missing_locations(tree)


def compile_step_code(
    source: str, filename: str, *, flags: int = 0, dont_inherit: bool = False
) -> CodeType:
    """Compile a python step's code (SyntaxError and ValueError as `compile` raises them;
    its warnings each time: validation reports them)."""
    with _AST_LOCK:
        tree = ast.parse(source, filename, "exec")
        code: CodeType = compile(
            wrap_module_return(tree), filename, "exec", flags=flags, dont_inherit=dont_inherit
        )
    return code


@functools.lru_cache(maxsize=512)
def cached_step_code(source: str, filename: str) -> CodeType:
    """compile_step_code for the python tool: a step's rows run the same code, compiled
    once per process (a code object is immutable; each run executes it in a namespace
    of its own). Failures are not kept: a bad source raises on every call."""
    return compile_step_code(source, filename)
