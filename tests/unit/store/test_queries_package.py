"""`store.queries` is a package of one module per area; the engine's areas are
re-exported flat (`queries.claim`), so a query added to one of their modules and not to
`__all__` would be missing for every caller of the flat name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from noetl_celery.store import queries

# used as modules by their managers, not re-exported (see the package docstring): the
# operators' read models, the http tool's pacing schedule, the publish outbox,
# retention's prune and an ended execution's trace
READ_MODELS = {
    "overview",
    "history",
    "catalog_reads",
    "compat",
    "reruns",
    "owners",
    "metrics",
    "pacing",
    "outbox",
    "notifications",
    "prune",
    "tracing",
    "quarantine",
    "throttle",
}


def _areas() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(queries.__path__))


def test_every_module_is_an_engine_area_or_a_read_model() -> None:
    areas = set(_areas()) - READ_MODELS
    assert set(_areas()) >= READ_MODELS
    assert areas == {
        "_common",
        "batches",
        "catalog",
        "children",
        "commands",
        "frames",
        "decisions",
        "executions",
        "inbox",
        "operator",
        "parking",
        "reaper",
        "results",
        "schedules",
        "termination",
    }


def test_every_query_of_an_engine_area_is_re_exported() -> None:
    exported = set(queries.__all__)
    for name in sorted(set(_areas()) - READ_MODELS):
        module = importlib.import_module(f"{queries.__name__}.{name}")
        defined = {
            attr
            for attr, value in vars(module).items()
            if inspect.isfunction(value)
            and value.__module__ == module.__name__
            and not attr.startswith("_")
        }
        missing = defined - exported
        assert not missing, f"store/queries/{name}.py: add {sorted(missing)} to __all__"
        for attr in defined:
            assert getattr(queries, attr) is getattr(module, attr), attr


def test_the_flat_names_callers_use_are_there() -> None:
    for name in ("claim", "close_command", "insert_execution", "STARTED", "ResultCache"):
        assert name in queries.__all__
        assert hasattr(queries, name)
