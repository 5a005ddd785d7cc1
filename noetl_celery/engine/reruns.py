"""Executions started again from an ended one, as methods of `Engine` (engine.service):
`rerun` (from the start, a step, or the failed items) and `redrive` (quarantined items).
Both are planned by passes.rerun and linked to the original (`rerun_of`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from noetl_celery.constants import TRIGGER_RERUN
from noetl_celery.engine import readmodels
from noetl_celery.errors import ItemsRedriven
from noetl_celery.passes.playbooks import PlaybookCache
from noetl_celery.passes.rerun import RerunError, plan_redrive, plan_rerun
from noetl_celery.store.repository import Store


class EngineReruns:
    """Mixed into `Engine`, which provides the store, the playbook cache and
    `start_entry`."""

    store: Store
    playbooks: PlaybookCache
    start_entry: Callable[..., str]  # Engine.start_entry

    def rerun(
        self,
        execution_id: str,
        *,
        from_step: str | None = None,
        failed_items: bool = False,
        overrides: dict[str, Any] | None = None,
    ) -> str:
        """Start a new execution of the catalog version `execution_id` ran, with its
        payload and `overrides`: from the first step, from `from_step` (with the
        variables and earlier results that step saw), or over the failed items of the
        original's loops (then on along the flow). Raises RerunError for a rerun that
        cannot be made (still running, unknown step, no failed items)."""
        original = self.store.execution(execution_id)  # raises ExecutionNotFound
        plan = plan_rerun(
            self.store,
            original,
            self.playbooks.get(original.catalog_id),
            from_step=from_step,
            failed_only=failed_items,
            overrides=overrides,
        )
        return self.start_entry(
            self.store.catalog_entry(original.catalog_id),
            plan.payload,
            trigger=TRIGGER_RERUN,
            rerun_of=execution_id,
            trigger_detail=plan.detail,
        )

    def redrive(
        self,
        execution_id: str,
        *,
        step: str | None = None,
        kind: str | None = None,
        items: Sequence[str] = (),
        overrides: dict[str, Any] | None = None,
    ) -> str:
        """Start a new execution (a rerun of `execution_id`, `rerun_of` linking them)
        that runs exactly the quarantined items chosen by `step`, error `kind` and item
        ids (`step:epoch:iteration`; every one not yet redriven when none is given), and
        nothing else: the step's arcs are not followed (the state's `halt`). Each item
        is marked redriven in the original in the transaction that writes the new
        execution: an item is never redriven twice.
        RerunError when there is nothing to redrive or an item is unknown or taken."""
        original = self.store.execution(execution_id)  # raises ExecutionNotFound
        readmodels.check_kind(kind)
        plan = plan_redrive(
            self.store,
            original,
            self.playbooks.get(original.catalog_id),
            step=step,
            kind=kind,
            item_ids=items,
            overrides=overrides,
        )
        try:
            return self.start_entry(
                self.store.catalog_entry(original.catalog_id),
                plan.payload,
                trigger=TRIGGER_RERUN,
                rerun_of=execution_id,
                trigger_detail=plan.detail,
                redriven=plan.redriven,
            )
        except ItemsRedriven as exc:
            raise RerunError(str(exc)) from exc
