"""Parsed playbooks by catalog id (catalog rows never change, so this caches forever)."""

from __future__ import annotations

import threading

from noetl_celery.models.playbook import Playbook
from noetl_celery.models.script_source import StoredScripts
from noetl_celery.models.validation import load_playbook
from noetl_celery.store.repository import Store


class PlaybookCache:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._parsed: dict[int, Playbook] = {}
        self._lock = threading.Lock()

    def get(self, catalog_id: int) -> Playbook:
        with self._lock:
            cached = self._parsed.get(catalog_id)
        if cached is not None:
            return cached
        playbook = load_playbook(self._store.catalog_content(catalog_id), f"catalog:{catalog_id}")
        playbook.attach_scripts(StoredScripts.from_json(self._store.catalog_scripts(catalog_id)))
        return self.keep(catalog_id, playbook)

    def keep(self, catalog_id: int, playbook: Playbook) -> Playbook:
        """Cache `playbook` (its scripts attached) as catalog version `catalog_id`: the
        process that registered the text has it parsed already. The first one kept wins,
        so every reader of a version shares one object."""
        with self._lock:
            return self._parsed.setdefault(catalog_id, playbook)
