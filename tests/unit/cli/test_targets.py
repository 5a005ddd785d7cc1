"""`run PATH`: telling files from catalog references, and the did-you-mean."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl_celery.cli.targets import TargetError, read_target, split_ref
from noetl_celery.engine.catalog import suggest
from noetl_celery.errors import InputInvalid

KNOWN = ["examples/hello_world", "examples/api_to_postgres", "flows/daily_pull"]


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("examples/hello_world", ("examples/hello_world", None)),
        ("examples/hello_world@2", ("examples/hello_world", 2)),
        ("examples/hello_world@latest", ("examples/hello_world", None)),
        ("a@b@3", ("a@b", 3)),
    ],
)
def test_split_ref(ref: str, expected: tuple[str, int | None]) -> None:
    assert split_ref(ref) == expected


@pytest.mark.parametrize("ref", ["x@", "x@0", "x@-1", "x@1.5", "x@two", "@3"])
def test_split_ref_rejects_bad_versions(ref: str) -> None:
    with pytest.raises(TargetError):
        split_ref(ref)


def test_an_existing_file_is_read_and_anything_else_is_a_reference(tmp_path: Path) -> None:
    file = tmp_path / "flow@2.yaml"  # an `@` in a file name is a file name
    file.write_text("text")
    assert read_target(str(file)).text == "text"
    ref = read_target(str(tmp_path / "missing@2"))
    assert ref.text is None and ref.path == str(tmp_path / "missing") and ref.version == 2
    with pytest.raises(TargetError, match="is a directory"):
        read_target(str(tmp_path))
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe")
    with pytest.raises(InputInvalid, match="not UTF-8"):
        read_target(str(tmp_path / "binary.yaml"))


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        ("examples/helo_world", ["examples/hello_world"]),  # a typo
        ("hello_world", ["examples/hello_world"]),  # the last segment
        ("examples/hello_world.yaml", ["examples/hello_world"]),  # given as a file name
        ("playbooks/examples/hello_world.yaml", ["examples/hello_world"]),
        ("flows/daily_pul", ["flows/daily_pull"]),
        ("something/else", []),
    ],
)
def test_suggest(wanted: str, expected: list[str]) -> None:
    assert suggest(wanted, KNOWN) == expected


def test_suggest_with_an_empty_catalog() -> None:
    assert suggest("examples/hello_world", []) == []
