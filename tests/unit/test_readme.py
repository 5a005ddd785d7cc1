"""Every YAML example of the docs and the README, and every bundled example playbook,
validates without a single problem (warnings included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl_celery.models.validation import validate_file, validate_text
from tests.support.readme import DOCS, Example, contained, examples

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "playbooks" / "examples").glob("*.yaml"))
ALL = examples()


def test_the_docs_have_examples_for_every_tool() -> None:
    tools = examples(DOCS / "reference" / "tools.md")
    kinds = {f"kind: {k}" for k in ("python", "http", "postgres", "duckdb", "workbook")}
    kinds |= {"kind: noop", "kind: playbook"}
    for kind in kinds:
        assert any(kind in e.text for e in tools), kind
    # every runnable example of the Tools page says what it returns (a test checks it)
    runnable = [e for e in tools if not e.text.startswith("spec:")]
    assert len(runnable) == 9
    assert all(e.expected for e in runnable), [e.where for e in runnable if not e.expected]


def test_examples_come_from_the_readme_and_the_docs() -> None:
    pages = {e.page for e in ALL}
    assert {"README.md", "reference/tools.md", "reference/dsl.md", "tutorial.md"} <= pages


def test_the_tutorial_shows_the_bundled_playbook_as_it_is() -> None:
    """Its block includes the file (pymdownx.snippets), so the two cannot differ."""
    bundled = (EXAMPLES[0].parent / "api_to_postgres.yaml").read_text()
    [block] = [e for e in examples(DOCS / "tutorial.md") if "api_to_postgres" in e.text]
    assert block.text.rstrip("\n") == bundled.rstrip("\n")


@pytest.mark.parametrize("example", ALL, ids=lambda e: e.where)
def test_docs_yaml_validates(example: Example) -> None:
    report = validate_text(example.playbook({"api_url": "http://127.0.0.1:8765"}))
    assert report.problems == [], f"{example.where}: {report.problems}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_playbooks_validate(path: Path) -> None:
    assert validate_file(path).problems == []


def test_a_wrong_example_is_caught() -> None:
    """The checks above can fail: a misspelt field and a wrong documented result."""
    bad = Example("Tools", 1, "- step: a\n  tool: {kind: pyhton, code: x}\n", {})
    assert not validate_text(bad.playbook()).ok
    with pytest.raises(AssertionError, match="must be a playbook"):
        Example("Tools", 1, "kind: noop\n", {}).playbook()
    assert contained({"rows": [{"n": 1}], "status": "ok"}, {"rows": [{"n": 2}], "x": 1}) == [
        "result.rows: the docs say [{'n': 1}], got [{'n': 2}]",
        "result.status: missing",
    ]
    assert contained({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}, "d": 3}) == []
