"""Fixtures for integration tests that drive the real worker processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.engine.service import Engine
from tests.support.engines import celery_engine


@pytest.fixture
def engine_on_workers(
    distributed: dict[str, Any], credentials_file: Path, tmp_path: Path
) -> Iterator[Engine]:
    """An engine in this process that publishes to the session's worker processes."""
    built = celery_engine(distributed["url"], distributed["redis_url"], tmp_path, credentials_file)
    yield built
    built.close()


@pytest.fixture(scope="session")
def served(distributed: dict[str, Any]) -> Iterator[Any]:
    """`noetl-celery serve` (no auth, loopback) on the session's database and workers."""
    from tests.support.server import serving

    with serving(distributed["env"]) as server:
        yield server
