"""Every example of the docs' Tools page (docs/reference/tools.md) runs and returns what
the page says."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl_celery.engine.service import Engine
from tests.support.engines import embedded_engine
from tests.support.example_api import ExampleApi
from tests.support.readme import DOCS, Example, contained, examples

pytestmark = pytest.mark.acceptance
HELLO = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "hello_world.yaml"
TOOLS = [e for e in examples(DOCS / "reference" / "tools.md") if e.expected]


@pytest.fixture
def engine(sqlite_url: str, tmp_path: Path, sample_credentials: Path) -> Iterator[Engine]:
    built = embedded_engine(sqlite_url, tmp_path / "home", sample_credentials)
    built.register_file(HELLO)  # the `kind: playbook` example calls it
    yield built
    built.close()


def test_the_tools_page_has_runnable_examples() -> None:
    assert len(TOOLS) == 9


@pytest.mark.parametrize("example", TOOLS, ids=lambda e: e.where)
def test_tool_example_returns_what_the_docs_say(
    example: Example, engine: Engine, example_api: ExampleApi
) -> None:
    execution_id = engine.start_text(example.playbook({"api_url": example_api.url}))
    engine.wait(execution_id, 60)
    summary = engine.summary(execution_id)
    assert summary["status"] == "COMPLETED", (example.where, summary["error"])
    for step, documented in example.expected.items():
        assert contained(documented, summary["steps"][step], step) == [], example.where
