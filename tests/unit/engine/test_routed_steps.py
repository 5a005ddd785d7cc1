"""Which steps of a playbook `status` names a queue for (engine.routing.routed_steps):
a step's `spec.queue` wins, else the queue of its tools' one kind, else none."""

from __future__ import annotations

import yaml

from noetl_celery.engine.routing import routed_steps
from noetl_celery.models.playbook import Playbook

PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: r, path: tests/r}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: fetch}]}
  - step: fetch
    spec: {queue: io}
    tool: {kind: python, code: "result = 1"}
    next: {arcs: [{step: compute}]}
  - step: compute
    tool: {kind: python, code: "result = 2"}
    next: {arcs: [{step: mixed}]}
  - step: mixed
    tool:
      - {name: a, kind: python, code: "result = 3"}
      - {name: b, kind: noop}
"""


def test_spec_queue_wins_then_the_kind_then_nothing() -> None:
    playbook = Playbook.model_validate(yaml.safe_load(PLAYBOOK))
    assert routed_steps(playbook, {}) == {"fetch": "io"}
    # python -> cpu: fetch keeps its own queue; a step mixing kinds stays on the default
    assert routed_steps(playbook, {"python": "cpu"}) == {"fetch": "io", "compute": "cpu"}
