"""What `run PATH` runs: a playbook file, or else a registered catalog path
(`examples/hello_world`, `examples/hello_world@2`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noetl_celery.engine.service import Engine
from noetl_celery.errors import CatalogNotFound
from noetl_celery.models.validation import ValidationReport, read_playbook


class TargetError(Exception):
    """PATH cannot name a playbook (a directory, an unreadable file, a bad @VERSION)."""


@dataclass(frozen=True)
class Target:
    """A playbook file's text, or a catalog reference (`text` is None)."""

    arg: str
    text: str | None = None
    path: str | None = None
    version: int | None = None


def split_ref(ref: str) -> tuple[str, int | None]:
    """`PATH[@VERSION]` -> (path, version); `@latest` is the same as no version."""
    path, sep, version = ref.rpartition("@")
    if not sep:
        return ref, None
    if not path:
        raise TargetError(f"'{ref}' has no catalog path before '@'")
    if version == "latest":
        return path, None
    if not version.isdigit() or int(version) < 1:
        raise TargetError(
            f"version '{version}' in '{ref}' is not a version number (use PATH@VERSION, "
            f"e.g. {path}@1)"
        )
    return path, int(version)


def read_target(arg: str) -> Target:
    """A file that exists is read now (before anything connects to the database);
    anything else is taken for a catalog reference, resolved by `start_target`."""
    file = Path(arg)
    if file.is_dir():
        raise TargetError(f"{arg} is a directory; give a playbook file or a catalog path")
    if file.exists():  # read within the bounds of models.text_files (InputInvalid)
        return Target(arg, text=read_playbook(file))
    path, version = split_ref(arg)
    return Target(arg, path=path, version=version)


def start_target(
    engine: Engine,
    target: Target,
    payload: dict[str, Any],
    validated: ValidationReport | None = None,
) -> str:
    """Start the execution; a catalog reference starts exactly the version it names (the
    latest when none). CatalogNotFound (one line) when PATH is neither a file nor
    registered. `validated`: the file's validation report, when the caller made it."""
    if target.text is not None:
        return engine.start_text(target.text, payload, file=target.arg, validated=validated)
    assert target.path is not None
    try:
        entry = engine.catalog.resolve(target.path, target.version)
    except CatalogNotFound as exc:
        if target.version is not None:
            raise  # the path is registered (or not) whatever the version: say just that
        raise CatalogNotFound(f"{target.arg} is not a playbook file, and {exc}") from exc
    return engine.start_entry(entry, payload)
