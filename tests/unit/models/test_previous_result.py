"""Which steps read bare `{{ result }}`: only theirs name the routing step (issue 31)."""

from __future__ import annotations

import textwrap

from noetl_celery.models.validation import load_playbook
from noetl_celery.orchestrator.decisions import NewCommand
from tests.unit.orchestrator.sim import Sim, ok, playbook

TEXT = textwrap.dedent(
    """\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: prev}
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
        next: {arcs: [{step: reads}]}
      - step: reads
        tool: {kind: python, input: {r: "{{ result.n }}"}, code: "result = r"}
        next: {arcs: [{step: code_only}]}
      - step: own
        tool: {kind: python, input: {x: "{{ reads.result }}"}, code: "result = x"}
      - step: code_only
        tool: {kind: python, code: "result = {'a': 1}\\nprint(result)"}
    """
)


def test_reads_previous_result_looks_at_worker_rendered_fields_only() -> None:
    pb = load_playbook(TEXT)
    assert pb.reads_previous_result("reads")  # input `{{ result.n }}`
    assert not pb.reads_previous_result("start")
    assert not pb.reads_previous_result("own")  # `reads.result` is an attribute
    assert not pb.reads_previous_result("code_only")  # python's own variable


def test_only_commands_of_steps_reading_result_name_the_routing_step() -> None:
    sim = Sim(playbook(TEXT), runner=lambda step, item, iteration: ok({"n": 1}))
    sim.run()
    commands: list[NewCommand] = [c for d in sim.decisions for c in d.commands]
    metas = {c.step: c.meta for c in commands}
    assert metas == {"start": None, "reads": {"prev": "start"}, "code_only": None}
