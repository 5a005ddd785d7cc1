"""Sub-playbooks on the worker's side (`tool.kind: playbook`, worker.subplaybook): a
running task's way to the catalog and to detached children, and parking a command that
waits for its child while the child is created, in one transaction."""

from __future__ import annotations

import dataclasses

from noetl_celery.passes.ids import new_execution_id
from noetl_celery.passes.orchestrate import PassDriver
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ClaimedCommand, SpawnRequest
from noetl_celery.tools.redaction import mask_command_value
from noetl_celery.worker.subplaybook import Suspended


class CommandChildren:
    """Sub-playbook access for the task a worker runs (worker.subplaybook.Children)."""

    def __init__(self, store: Store, orchestrator: PassDriver, command: ClaimedCommand) -> None:
        self.store = store
        self.orchestrator = orchestrator
        self.command = command

    def check(self, request: SpawnRequest) -> None:
        self.store.resolve_catalog(request.path, request.version)

    def start_detached(self, request: SpawnRequest) -> str:
        request = dataclasses.replace(request, payload=mask_command_value(request.payload))
        child = self.store.children.spawn_detached(self.command, request, new_execution_id())
        self.orchestrator.drive(child, wait=True)
        return child


def wait_for_child(
    store: Store, orchestrator: PassDriver, command: ClaimedCommand, suspended: Suspended
) -> None:
    """Park the command and start its child (one transaction), then drive the child."""
    child, resumed = store.children.suspend_and_spawn(
        command, suspended.continuation, suspended.request, new_execution_id()
    )
    if child is None:
        return  # no longer ours
    if resumed:  # that child had already finished (an earlier run of this command)
        orchestrator.dispatcher.publish([command.command_id])
    else:
        orchestrator.drive(child, wait=True)
