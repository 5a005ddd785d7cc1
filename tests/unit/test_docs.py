"""The README stays short and keeps its two commands; every `docs/design.md §N` and
`docs/reference/dsl.md §N` the code cites is a heading of that page; the pages the docs
build generates (CLI, REST API) cover every command and every route. (`mkdocs build
--strict` itself runs in .ci/run.)"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from noetl_celery.cli.docgen import reference_markdown, walk
from noetl_celery.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 150
TWO_COMMANDS = [
    "```sh",
    "pip install . && noetl-celery run playbooks/examples/hello_world.yaml      "
    "# no services needed",
    "pip install -e '.[dev]' && python -m pytest                                "
    "# needs Postgres, Redis, RabbitMQ on 127.0.0.1",
    "```",
]
CITED = re.compile(r"docs/(design|reference/dsl)\.md ((?:§[\d.]*\d[-, ]*)+)")
BARE = re.compile(r"(?<![\w/.\[])(design|reference) §")  # a link text [design §9] is fine


def test_the_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) < MAX_README_LINES, f"README.md has {len(lines)} lines; move it to docs/"


def test_the_readme_starts_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    assert lines[0] == "# noetl-celery"
    assert lines[2:6] == TWO_COMMANDS


def sources() -> list[Path]:
    found = [*ROOT.joinpath("noetl_celery").rglob("*.py"), *ROOT.joinpath("bench").rglob("*.py")]
    return [*found, ROOT / "pyproject.toml", *ROOT.joinpath("docs").rglob("*.md")]


def section_numbers(page: Path) -> set[str]:
    """`## 2. Invariants` -> "2", `### 2.5 Orchestration ...` -> "2.5"."""
    return set(re.findall(r"^#{2,4} (\d+(?:\.\d+)*)\.? ", page.read_text(), re.M))


def citations() -> list[tuple[str, str, str]]:
    """(where, page, section) of every citation in the code and the docs."""
    cited = []
    for path in sources():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for page, sections in CITED.findall(line):
                for section in re.findall(r"§([\d.]*\d)", sections):
                    cited.append((f"{path.relative_to(ROOT)}:{number}", page, section))
    return cited


def test_every_citation_names_a_heading() -> None:
    headings = {
        "design": section_numbers(ROOT / "docs" / "design.md"),
        "reference/dsl": section_numbers(ROOT / "docs" / "reference" / "dsl.md"),
    }
    found = citations()
    assert len(found) > 30  # the check below has something to check
    missing = [c for c in found if c[2] not in headings[c[1]]]
    assert missing == []


def test_a_wrong_citation_is_caught() -> None:
    assert CITED.findall("see (docs/design.md §2.5, §7)") == [("design", "§2.5, §7")]
    assert "99" not in section_numbers(ROOT / "docs" / "design.md")


def test_no_citation_of_a_document_outside_the_repository() -> None:
    bare = []
    for path in sources():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if BARE.search(line):
                bare.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert bare == [], "cite docs/design.md §N or docs/reference/dsl.md §N"


def test_the_cli_reference_has_every_command() -> None:
    page = reference_markdown()
    paths = [path for path, _ in walk(cli)]
    assert "noetl-celery schedule add" in paths and "noetl-celery db upgrade" in paths
    for path in paths[1:]:
        assert f"`{path}`" in page, path
    assert "Example:" in page and "-c, --concurrency" in page


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_generate", ROOT / "docs" / "_hooks" / "generate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rest_page_has_every_route(hook: ModuleType) -> None:
    document = hook.openapi_document()
    page = hook.rest_markdown(document)
    routes = [
        (method, path)
        for path, operations in document["paths"].items()
        for method in operations
        if method in hook.METHODS
    ]
    assert len(routes) > 30
    for method, path in routes:
        assert f"`{method.upper()} {path}`" in page, (method, path)
