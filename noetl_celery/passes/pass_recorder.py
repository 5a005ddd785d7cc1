"""Writes orchestration passes as JSON records (`NOETL_RECORD_PASSES=<dir>`), the
material of the replay tests (tests/fixtures/passes, orchestrator.recording).

One file per pass, `<execution>-<event ids>.json`, and each playbook once, as
`playbooks/<sha256>.yaml`. Off unless configured: the orchestrator then never builds a
record (no wrapper around its facts, nothing serialised).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from noetl_celery.orchestrator.decisions import Completion, Decision, Limits
from noetl_celery.orchestrator.recording import RecordingFacts, pass_record, start_record
from noetl_celery.orchestrator.state import ExecutionState

log = logging.getLogger("noetl_celery.orchestrate")


class PassRecorder:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def write(
        self,
        *,
        playbook_text: str,
        state: ExecutionState,
        completions: list[Completion],
        facts: RecordingFacts,
        now: float,
        limits: Limits,
        decision: Decision,
    ) -> None:
        """Record one `decide` pass."""
        first = completions[0].event_id if completions else 0
        self._save(
            f"{state.execution_id}-{first:09d}-{len(completions)}.json",
            playbook_text,
            lambda playbook: pass_record(
                playbook=playbook,
                state=state,
                completions=completions,
                facts=facts,
                now=now,
                limits=limits,
                decision=decision,
            ),
        )

    def write_start(
        self,
        *,
        playbook_text: str,
        execution_id: str,
        payload: dict[str, Any] | None,
        inputs: dict[str, Any],
        facts: RecordingFacts,
        now: float,
        limits: Limits,
        decision: Decision,
    ) -> None:
        """Record an execution's first pass (`start`)."""
        self._save(
            f"{execution_id}-000000000-0.json",
            playbook_text,
            lambda playbook: start_record(
                playbook=playbook,
                execution_id=execution_id,
                payload=payload,
                inputs=inputs,
                facts=facts,
                now=now,
                limits=limits,
                decision=decision,
            ),
        )

    def _save(
        self, name: str, playbook_text: str, build: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> None:
        """Write the playbook (once) and the record; a failure to write is logged, never
        fails the pass."""
        try:
            digest = hashlib.sha256(playbook_text.encode()).hexdigest()
            playbooks = self.directory / "playbooks"
            playbooks.mkdir(parents=True, exist_ok=True)
            yaml_file = playbooks / f"{digest}.yaml"
            if not yaml_file.exists():
                _write(yaml_file, playbook_text)
            record = build({"sha256": digest})
            _write(self.directory / name, json.dumps(record, indent=1, sort_keys=True))
        except (OSError, TypeError, ValueError) as exc:
            log.warning("could not record an orchestration pass: %s", exc)


def _write(path: Path, text: str) -> None:
    """Whole or not at all: a reader never sees half a record."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)
