"""`models.legacy`: each legacy form NoETL accepts, rewritten to the current one, with a
warning at the legacy key; the current forms are left alone."""

from __future__ import annotations

import copy
import textwrap
from typing import Any

import pytest
import yaml

from noetl_celery.models.legacy import normalise_legacy
from noetl_celery.models.validation import validate_text


def doc(tool: str) -> dict[str, Any]:
    data = yaml.safe_load(
        "workflow:\n  - step: a\n    tool:\n" + textwrap.indent(textwrap.dedent(tool), "      ")
    )
    assert isinstance(data, dict)
    return data


# (id, tool as written, tool after normalising, paths of the notes)
CASES = [
    (
        "credential-is-auth",
        "kind: postgres\ncredential: pg\ncommand: select 1\n",
        {"kind": "postgres", "auth": "pg", "command": "select 1"},
        [("workflow", 0, "tool", "credential")],
    ),
    (
        "credentials-is-auth",
        "kind: http\ncredentials: api\nurl: http://x\n",
        {"kind": "http", "auth": "api", "url": "http://x"},
        [("workflow", 0, "tool", "credentials")],
    ),
    (
        "auth-wins-over-credential",
        "kind: postgres\nauth: new\ncredential: old\ncommand: x\n",
        {"kind": "postgres", "auth": "new", "command": "x"},
        [("workflow", 0, "tool", "credential")],
    ),
    (
        "duckdb-credentials-is-its-own-field",
        "kind: duckdb\ncredentials: [{name: s3}]\ncommand: x\n",
        {"kind": "duckdb", "credentials": [{"name": "s3"}], "command": "x"},
        [],
    ),
    (
        "playbook-resource-path",
        "kind: playbook\nresource_path: a/b\n",
        {"kind": "playbook", "path": "a/b"},
        [("workflow", 0, "tool", "resource_path")],
    ),
    (
        "playbook-playbook-path",
        "kind: playbook\nplaybook_path: a/b\n",
        {"kind": "playbook", "path": "a/b"},
        [("workflow", 0, "tool", "playbook_path")],
    ),
    (
        "resource-path-only-means-path-on-playbook-tools",
        "kind: python\nresource_path: a/b\ncode: x = 1\n",
        {"kind": "python", "resource_path": "a/b", "code": "x = 1"},
        [],
    ),
    (
        "else-without-then-is-skipped",
        "kind: noop\nspec: {policy: {rules: [{else: {do: continue, set: {ctx.a: 1}}}]}}\n",
        {"kind": "noop", "spec": {"policy": {"rules": [{"else": {}}]}}},
        [("workflow", 0, "tool", "spec", "policy", "rules", 0, "else")],
    ),
    (
        "else-as-a-scalar-is-skipped",
        "kind: noop\nspec: {policy: {rules: [{else: continue}]}}\n",
        {"kind": "noop", "spec": {"policy": {"rules": [{"else": {}}]}}},
        [("workflow", 0, "tool", "spec", "policy", "rules", 0, "else")],
    ),
    (
        "else-rule-own-when-then-are-dropped",
        "kind: noop\nspec: {policy: {rules: [{when: x, then: {do: fail}, "
        "else: {then: {do: continue}}}]}}\n",
        {"kind": "noop", "spec": {"policy": {"rules": [{"else": {"then": {"do": "continue"}}}]}}},
        [
            ("workflow", 0, "tool", "spec", "policy", "rules", 0, "when"),
            ("workflow", 0, "tool", "spec", "policy", "rules", 0, "then"),
        ],
    ),
    (
        "when-without-then-is-kept-with-a-note",
        "kind: noop\nspec: {policy: {rules: [{when: x}]}}\n",
        {"kind": "noop", "spec": {"policy": {"rules": [{"when": "x"}]}}},
        [("workflow", 0, "tool", "spec", "policy", "rules", 0)],
    ),
    (
        "current-forms-untouched",
        "kind: postgres\nauth: pg\ncommand: x\nspec: {policy: {rules: [{when: x, then: "
        "{do: fail}}, {else: {then: {do: continue}}}]}}\n",
        None,
        [],
    ),
]


@pytest.mark.parametrize(
    ("tool", "after", "paths"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_normalise_legacy(tool: str, after: dict[str, Any] | None, paths: list[Any]) -> None:
    data = doc(tool)
    before = copy.deepcopy(data["workflow"][0]["tool"])
    notes = normalise_legacy(data)
    assert [n.path for n in notes] == paths
    assert data["workflow"][0]["tool"] == (before if after is None else after)


def test_pipeline_tasks_and_workbook_tools_are_normalised() -> None:
    data = yaml.safe_load(
        textwrap.dedent(
            """\
            workbook:
              - name: w
                tool: {kind: postgres, credential: pg, command: x}
            workflow:
              - step: a
                tool:
                  - {name: t, kind: postgres, credential: pg, command: x}
            """
        )
    )
    notes = normalise_legacy(data)
    assert [n.path for n in notes] == [
        ("workflow", 0, "tool", 0, "credential"),
        ("workbook", 0, "tool", "credential"),
    ]
    assert data["workbook"][0]["tool"]["auth"] == "pg"
    assert data["workflow"][0]["tool"][0]["auth"] == "pg"


@pytest.mark.parametrize("data", [None, [], "text", {"workflow": "x"}, {"workflow": [1, {}]}])
def test_any_shape_is_tolerated(data: Any) -> None:
    assert normalise_legacy(data) == []


def test_validate_reports_the_legacy_key_as_a_warning_on_its_line() -> None:
    text = textwrap.dedent(
        """\
        apiVersion: noetl.io/v2
        kind: Playbook
        metadata: {name: p}
        workflow:
          - step: a
            tool:
              kind: postgres
              credential: pg
              command: select 1
        """
    )
    report = validate_text(text, "pb.yaml")
    assert report.ok and report.playbook is not None
    [warning] = report.warnings
    assert (warning.line, warning.step, warning.field) == (8, "a", "tool.credential")
    assert "deprecated" in warning.message
    tool = report.playbook.workflow[0].tool
    assert tool is not None and not isinstance(tool, list)
    assert tool.fields()["auth"] == "pg" and "credential" not in tool.fields()


def test_fields_of_a_noetl_only_kind_are_not_checked_as_templates_but_its_rules_are() -> None:
    text = textwrap.dedent(
        """\
        apiVersion: noetl.io/v2
        kind: Playbook
        metadata: {name: p}
        workflow:
          - step: a
            tool:
              kind: shell
              cmds: ["docker system df --format '{{`{{json .}}`}}'"]
              spec:
                policy:
                  rules:
                    - when: "{{ output.status == }}"
                      then: {do: continue}
        """
    )
    report = validate_text(text, "pb.yaml")
    assert [(p.severity, p.field) for p in report.problems] == [
        ("warning", "tool.kind"),
        ("error", "tool.spec.policy.rules[0].when"),
    ]
