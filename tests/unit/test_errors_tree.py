"""errors.py's docstring draws every exception class of the package, each under its real
base class; every one is a NoetlError unless it is one of the few kept outside on purpose."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import noetl_celery
from noetl_celery import errors
from noetl_celery.errors import NoetlError

# Not NoetlErrors on purpose (the reasons are in errors.py's second tree): adding one here
# is a decision, not a way to make this test pass.
DELIBERATE = {
    "_TimedOut",
    "Suspend",
    "Throttled",
    "PassCrashed",
    "CommandFailed",
    "CursorError",
    "ScriptFetchError",
    "PoolExhausted",
    "_ConfigProblem",
    "TargetError",
    "YamlSyntaxError",
    "ScriptConfigError",
    "RequestConfigError",
    "SqlSourceError",
    "StillRunning",
    "Detached",
    "YamlLimitExceeded",
    "UndefinedNameError",
    "TemplateTooBig",
    "InvalidInput",
    "BodyTooLarge",
}

_ROOT = re.compile(r"^    ([A-Za-z_][\w.]*)$")
_NODE = re.compile(r"^    ((?:│   |    )*)[├└]── ([A-Za-z_][\w.]*)")


def package_exceptions() -> list[type[BaseException]]:
    """Every exception class defined in the package (alembic's migration scripts aside:
    importing them runs a migration)."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(noetl_celery.__path__, "noetl_celery."):
        if ".migrations" in info.name:
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == info.name
            ):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def drawn_parents() -> dict[str, str | None]:
    """Each class drawn in errors.py's docstring -> the class drawn above it (None: a root)."""
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    for line in (errors.__doc__ or "").splitlines():
        root, node = _ROOT.match(line), _NODE.match(line)
        if root is not None:
            stack = [root.group(1).rsplit(".", 1)[-1]]
            parents[stack[0]] = None
        elif node is not None:
            depth = len(node.group(1)) // 4 + 1
            name = node.group(2).rsplit(".", 1)[-1]
            assert name not in parents, f"{name} drawn twice"
            del stack[depth:]
            parents[name] = stack[-1]
            stack.append(name)
    return parents


def test_the_walk_finds_the_package_exceptions() -> None:
    names = {cls.__name__ for cls in package_exceptions()}
    # the walk itself works: it reaches errors.py and modules deep in subpackages
    assert {"NoetlError", "StoreError", "ShapeError", "_TimedOut", "CursorError"} <= names


def test_every_exception_class_is_drawn_under_its_base() -> None:
    parents = drawn_parents()
    for cls in package_exceptions():
        where = f"{cls.__module__}.{cls.__qualname__}"
        assert cls.__name__ in parents, f"{where} is missing from errors.py's tree"
        if cls is NoetlError:
            continue
        assert parents[cls.__name__] == cls.__bases__[0].__name__, (
            f"{where} is drawn under {parents[cls.__name__]}, "
            f"but its base is {cls.__bases__[0].__name__}"
        )


def test_every_exception_class_is_a_noetl_error_or_deliberately_not() -> None:
    for cls in package_exceptions():
        if cls.__name__ in DELIBERATE:
            assert not issubclass(cls, NoetlError), f"{cls.__name__} is a NoetlError now"
        else:
            assert issubclass(cls, NoetlError), (
                f"{cls.__module__}.{cls.__qualname__} is not a NoetlError"
            )


def test_the_drawing_is_parsed() -> None:
    parents = drawn_parents()
    assert parents["NoetlError"] is None
    assert parents["StoreInterrupted"] == "StoreError"
    assert parents["Detached"] == "StillRunning"
    assert parents["InvalidInput"] == "ClickException"
