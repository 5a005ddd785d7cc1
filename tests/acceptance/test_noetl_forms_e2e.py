"""More of today's NoETL forms that noetl/e2e fixtures use (issue 31), each run end to end
with `noetl-celery run` embedded: `{{ result }}` as the routing step's result, `{{ … }}`
inside python code (as literals only), a task's `set:` after a failure a rule continues
past, and `kind: artifact` `action: get` of a step's `_ref`."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.test_noetl_forms_cli import playbook, run

PREVIOUS_RESULT = playbook(
    "previous_result",
    """\
    - step: start
      tool: {kind: python, code: "result = {'status': 'success', 'n': 2}"}
      next: {arcs: [{step: second}]}
    - step: second
      tool:
        kind: python
        input: {result: "{{ result }}"}
        code: |
          assert result['status'] == 'success', result
          result = {'seen': result['n']}
      next: {arcs: [{step: third}]}
    - step: third
      tool:
        kind: python
        input: {prev: "{{ result.seen }}", first: "{{ start.n }}"}
        code: "result = {'prev': prev, 'first': first}"
    """,
)


def test_result_in_a_step_is_the_routing_steps_result(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    code, summary, stderr = run(embedded_env, tmp_path, PREVIOUS_RESULT)
    assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
    assert summary["steps"]["second"] == {"seen": 2}
    assert summary["steps"]["third"] == {"prev": 2, "first": 2}


def test_result_in_the_first_step_is_undefined(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    text = playbook(
        "previous_result_first",
        """\
        - step: start
          tool: {kind: python, input: {r: "{{ result }}"}, code: "result = r"}
        """,
    )
    code, summary, stderr = run(embedded_env, tmp_path, text)
    assert code == 1 and summary["status"] == "FAILED", (summary, stderr)
    assert "'result' is undefined" in summary["errors"][0]["message"], summary


CODE_TEMPLATES = playbook(
    "code_templates",
    """\
    - step: start
      tool:
        kind: python
        code: |
          size = {{ workload.kb }} * {{ page_size }}
          label = "{{ name }}-{{ execution_id }}"
          braces = f"{{literal}}"
          result = {'size': size, 'label_ok': label.startswith('shop_7-'),
                    'braces': braces, 'ids': {{ ids }}}
    """,
    workload="{kb: 50, page_size: 5, name: shop_7, ids: [1, 'two']}",
)


def test_templates_in_python_code_render_as_literals(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    code, summary, stderr = run(embedded_env, tmp_path, CODE_TEMPLATES)
    assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
    # `f"{{literal}}"` names nothing the playbook defines: Python's braces, left alone
    assert summary["steps"]["start"] == {
        "size": 250,
        "label_ok": True,
        "braces": "{literal}",
        "ids": [1, "two"],
    }


def test_a_template_in_code_that_could_change_the_code_fails_the_step(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    text = playbook(
        "code_injection",
        """\
        - step: start
          tool: {kind: python, code: "result = {'evil': \\"{{ workload.evil }}\\"}"}
        """,
        workload="""{evil: '"); import os; os.system("touch /tmp/pwned-noetl"); ("'}""",
    )
    code, summary, stderr = run(embedded_env, tmp_path, text)
    assert code == 1 and summary["status"] == "FAILED", (summary, stderr)
    message = summary["errors"][0]["message"]
    assert "step 'start'" in message and "pass the value through `input:`" in message, message
    assert not Path("/tmp/pwned-noetl").exists()


SET_AFTER_FAILURE = playbook(
    "set_after_failure",
    """\
    - step: start
      tool:
        - name: bad
          kind: python
          code: "result = {}['missing']"
          spec:
            policy:
              rules:
                - else: {then: {do: continue}}
          set:
            bad_output: "{{ output }}"
        - name: report
          kind: python
          input: {prev: "{{ bad_output }}"}
          code: "result = {'was': prev['status'], 'kind': prev['error']['kind']}"
    """,
)


def test_a_tasks_set_applies_after_a_failure_a_rule_continues_past(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    code, summary, stderr = run(embedded_env, tmp_path, SET_AFTER_FAILURE)
    assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
    report = summary["steps"]["start"]["results"]["report"]
    assert report == {"was": "error", "kind": "python_error"}


ARTIFACT = playbook(
    "artifact_get",
    """\
    - step: start
      tool: {kind: python, code: "result = {'count': 3, 'items': [1, 2, 3]}"}
      next: {arcs: [{step: load}]}
    - step: load
      tool:
        kind: artifact
        action: get
        input: {result_ref: "{{ start._ref }}"}
      next: {arcs: [{step: use}]}
    - step: use
      tool:
        kind: python
        input: {data: "{{ load.data }}", ref: "{{ start._ref }}"}
        code: "result = {'items': data['items'], 'ref': ref}"
    """,
)


def test_artifact_get_loads_a_steps_stored_result_by_its_ref(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    code, summary, stderr = run(embedded_env, tmp_path, ARTIFACT)
    assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
    eid = summary["execution_id"]
    assert summary["steps"]["load"] == {"count": 3, "items": [1, 2, 3]}
    assert summary["steps"]["use"] == {
        "items": [1, 2, 3],
        "ref": f"noetl://execution/{eid}/result/start",
    }
    # `_ref` is an attribute, never a key of the result handed on whole
    assert "_ref" not in summary["steps"]["start"]


def test_artifact_get_of_another_executions_result_fails_naming_it(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    text = playbook(
        "artifact_other",
        """\
        - step: start
          tool:
            kind: artifact
            input: {result_ref: "noetl://execution/123/result/start"}
        """,
    )
    code, summary, stderr = run(embedded_env, tmp_path, text)
    assert code == 1 and summary["status"] == "FAILED", (summary, stderr)
    assert "names execution 123" in summary["errors"][0]["message"], summary


NOT_RUN = playbook(
    "not_run",
    """\
    - step: start
      tool: {kind: python, code: "result = {'v': 1}"}
      next: {arcs: [{step: use}]}
    - step: skipped
      tool: {kind: python, code: "result = 1"}
    - step: use
      tool:
        kind: python
        input:
          picked: "{{ skipped.v if skipped else start.v }}"
        code: |
          import json
          def main(picked, skipped='default', context=None):
              plain = json.dumps(list(context)) != ''
              return {'picked': picked, 'skipped': skipped, 'plain': plain,
                      'listed': 'skipped' in context}
    """,
)


def test_a_step_without_result_is_false_in_templates_and_absent_from_python(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    code, summary, stderr = run(embedded_env, tmp_path, NOT_RUN)
    assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
    assert summary["steps"]["use"] == {
        "picked": 1,
        "skipped": "default",
        "plain": True,
        "listed": False,
    }
