"""NoETL's legacy forms and the tool kinds this engine lacks, on real worker processes
(issue 13): a playbook NoETL runs is not refused here; a step of a kind this engine does
not run fails when it is reached, naming the step and the kind."""

from __future__ import annotations

import textwrap

import psycopg
import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.models.validation import validate_text

pytestmark = pytest.mark.integration


def playbook(name: str, steps: str, workload: str = "{}") -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: noetl.io/v2
        kind: Playbook
        metadata: {{name: {name}, path: tests/legacy/{name}}}
        workload: {workload}
        workflow:
        """
    ) + textwrap.indent(textwrap.dedent(steps), "  ")


UNSUPPORTED_KIND = playbook(
    "unsupported_kind",
    """\
    - step: start
      tool: {kind: python, code: "result = {'first': 1}"}
      next: {arcs: [{step: load}]}
    - step: load
      tool:
        kind: snowflake
        auth: sf_test
        command: SELECT 1
      next: {arcs: [{step: end}]}
    - step: end
      tool: {kind: noop}
    """,
)


def test_unsupported_kind_runs_until_that_step_and_fails_naming_it(
    engine_on_workers: Engine,
) -> None:
    report = validate_text(UNSUPPORTED_KIND, "pb.yaml")
    assert report.ok and [p.field for p in report.warnings] == ["tool.kind"]
    eid = engine_on_workers.start_text(UNSUPPORTED_KIND)
    row = engine_on_workers.wait(eid, 60)
    assert row.status == "FAILED"
    summary = engine_on_workers.summary(eid)
    assert summary["steps"]["start"]["first"] == 1  # the steps before it ran
    [error] = summary["errors"]
    assert error["step"] == "load"
    assert "kind snowflake is not supported by noetl-celery" in str(error["message"])
    assert "step 'load'" in str(error["message"])


def test_unsupported_kind_on_a_branch_not_taken_completes(engine_on_workers: Engine) -> None:
    text = playbook(
        "unsupported_branch",
        """\
        - step: start
          tool: {kind: noop}
          next:
            spec: {mode: exclusive}
            arcs:
              - {step: publish, when: "{{ workload.publish }}"}
              - {step: end}
        - step: publish
          tool: {kind: nats, subject: x}
        - step: end
          tool: {kind: python, code: "result = 'done'"}
        """,
        "{publish: false}",
    )
    eid = engine_on_workers.start_text(text)
    row = engine_on_workers.wait(eid, 60)
    assert row.status == "COMPLETED", row.error


LEGACY = playbook(
    "legacy_forms",
    """\
    - step: create
      tool:
        kind: postgres
        credential: pg_test
        command: |
          CREATE TABLE IF NOT EXISTS public.it_legacy (eid text, n int);
          DELETE FROM public.it_legacy WHERE eid = '{{ execution_id }}';
      next: {arcs: [{step: insert}]}
    - step: insert
      tool:
        - name: write
          kind: postgres
          credential: pg_test
          command: INSERT INTO public.it_legacy VALUES ('{{ execution_id }}', 7)
          spec:
            policy:
              rules:
                - else: {do: fail}
        - name: read
          kind: postgres
          credentials: pg_test
          command: SELECT n FROM public.it_legacy WHERE eid = '{{ execution_id }}'
          spec:
            policy:
              rules:
                - when: "{{ output.status == 'error' }}"
                  then: {do: fail}
                  else: {then: {do: continue}}
      next: {arcs: [{step: end}]}
    - step: end
      tool: {kind: noop}
    """,
)


def test_legacy_forms_validate_with_warnings_and_run(
    engine_on_workers: Engine, data_db: str
) -> None:
    report = validate_text(LEGACY, "pb.yaml")
    assert report.ok, report.errors
    fields = sorted(p.field or "" for p in report.warnings)
    assert fields == [
        "tool.credential",
        "tool[0].credential",
        "tool[0].spec.policy.rules[0].else",
        "tool[1].credentials",
        "tool[1].spec.policy.rules[0].then",
        "tool[1].spec.policy.rules[0].when",
    ]
    eid = engine_on_workers.start_text(LEGACY)
    row = engine_on_workers.wait(eid, 60)
    assert row.status == "COMPLETED", row.error
    with psycopg.connect(data_db) as conn:
        rows = conn.execute("SELECT n FROM public.it_legacy WHERE eid = %s", (eid,)).fetchall()
    assert rows == [(7,)]
