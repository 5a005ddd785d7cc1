"""noetl-celery: NoETL DSL v2 playbooks on Celery workers, Postgres as the source of truth.

`run` and `Client` are imported lazily so that `import noetl_celery` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Client", "run"]

if TYPE_CHECKING:
    from noetl_celery.api import Client, run


def __getattr__(name: str) -> Any:
    if name in __all__:
        from noetl_celery import api

        return getattr(api, name)
    raise AttributeError(f"module 'noetl_celery' has no attribute {name!r}")
