"""The catalog as operators see it: list paths, show a version, resolve `PATH[@VERSION]`
with a did-you-mean when the path is not registered."""

from __future__ import annotations

import difflib
from typing import Any

import yaml
from typing_extensions import TypedDict

from noetl_celery.errors import CatalogNotFound
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import (
    CatalogEntry,
    CatalogSummary,
    CatalogVersion,
    CatalogVersionJSON,
)

_PLAYBOOK_SUFFIXES = (".yaml", ".yml")


def suggest(wanted: str, known: list[str], limit: int = 3) -> list[str]:
    """Registered paths close to `wanted`: near spellings, the same path given as a file
    name (`examples/hello_world.yaml`), or the same last segment (`hello_world`)."""
    stem = wanted
    for suffix in _PLAYBOOK_SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    stem = stem.strip("/").removeprefix("./")
    found: list[str] = []
    last = stem.rsplit("/", 1)[-1]
    for path in known:
        # `playbooks/examples/hello_world` names the file of `examples/hello_world`
        if path == stem or stem.endswith("/" + path) or path.rsplit("/", 1)[-1] == last:
            found.append(path)
    for path in difflib.get_close_matches(stem, known, n=limit, cutoff=0.75):
        if path not in found:
            found.append(path)
    return found[:limit]


class CatalogShow(TypedDict):
    """One version as `catalog show --json` and `/api/v1/catalog/{path}` show it."""

    path: str
    version: int
    latest_version: int
    catalog_id: int
    name: str
    content_sha256: str
    registered_at: str
    # the playbook's own `metadata:` mapping, as written (YAML keys need not be strings)
    metadata: dict[Any, Any]
    versions: list[CatalogVersionJSON]
    # `script:` files stored with this version (passes.scripts): {base_dir, files}
    scripts: dict[str, Any] | None
    content: str


def _did_you_mean(paths: list[str]) -> str:
    if not paths:
        return ""
    return "; did you mean " + " or ".join(f"'{p}'" for p in paths) + "?"


class Catalog:
    def __init__(self, store: Store) -> None:
        self.store = store

    def listing(self) -> list[CatalogSummary]:
        return self.store.catalog_reads.listing()

    def versions(self, path: str) -> list[CatalogVersion]:
        return self.store.catalog_reads.versions(path)

    def _version(
        self, path: str, version: int | None
    ) -> tuple[CatalogVersion, list[CatalogVersion]]:
        """The wanted version (latest when None) and every version of the path;
        CatalogNotFound says what is registered instead."""
        found = self.versions(path)
        if not found:
            hint = _did_you_mean(suggest(path, [s.path for s in self.listing()]))
            raise CatalogNotFound(f"no playbook is registered at catalog path '{path}'{hint}")
        numbers = [v.version for v in found]
        if version is None:
            return found[-1], found
        for entry in found:
            if entry.version == version:
                return entry, found
        listed = ", ".join(str(n) for n in numbers)
        raise CatalogNotFound(
            f"catalog path '{path}' has no version {version} (registered: {listed})"
        )

    def resolve(self, path: str, version: int | None = None) -> CatalogEntry:
        """The entry to start for `path` (latest version unless given)."""
        found, _ = self._version(path, version)
        return CatalogEntry(found.catalog_id, found.path, found.version, found.name)

    def show(self, path: str, version: int | None = None) -> CatalogShow:
        """One version: its metadata, its YAML content and the path's versions."""
        found, all_versions = self._version(path, version)
        content = self.store.catalog_content(found.catalog_id)
        try:
            document = yaml.safe_load(content)
        except yaml.YAMLError:  # registered content always parsed; be safe anyway
            document = None
        metadata = document.get("metadata") if isinstance(document, dict) else None
        return {
            "path": found.path,
            "version": found.version,
            "latest_version": all_versions[-1].version,
            "catalog_id": found.catalog_id,
            "name": found.name,
            "content_sha256": found.content_sha256,
            "registered_at": found.to_json()["registered_at"],
            "metadata": metadata if isinstance(metadata, dict) else {},
            "versions": [v.to_json() for v in all_versions],
            "scripts": self.store.catalog_scripts(found.catalog_id),
            "content": content,
        }
