"""The public API of `noetl_celery.models.validation` and the YAML position map."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl_celery.errors import PlaybookInvalid
from noetl_celery.models.playbook import Playbook
from noetl_celery.models.validation import (
    ValidationReport,
    load_playbook,
    validate_file,
    validate_text,
)
from noetl_celery.models.yaml_positions import YamlSyntaxError, parse_yaml

# Exercises most of the DSL at once: pipeline with jump to `previous`, a single tool with
# a policy (one-task pipeline `<step>_task`), workbook (single and pipeline form), parallel
# and cursor loops, inclusive fan-out, arc/step/policy `set`, sub-playbook, duckdb.
VALID = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: valid
  path: tests/valid
workload:
  api: http://localhost:1
  slots: 2
  pg_auth: pg
workbook:
  - name: score
    tool: {kind: python, code: "result = {'score': 1}"}
executor:
  spec: {entry_step: start, final_step: done}
workflow:
  - step: start
    desc: fetch pages
    tool:
      - name: init
        kind: noop
        spec: {policy: {rules: [{when: true, then: {do: continue, set: {iter.page: 1}}}]}}
      - name: fetch
        kind: http
        url: "{{ api }}/items"
        params: {page: "{{ iter.page }}"}
        spec:
          policy:
            rules:
              - when: "{{ output.status == 'error' }}"
                then: {do: retry, attempts: 3, backoff: fixed, delay: 0.5}
              - when: "{{ iter.page < 3 }}"
                then: {do: jump, to: previous, set: {iter.page: "{{ iter.page + 1 }}"}}
              - else: {then: {do: continue}}
      - name: scored
        kind: workbook
        task: score
    next:
      spec: {mode: inclusive}
      arcs:
        - {step: items, when: "{{ start.ok }}", set: {ctx.seen: 1}}
        - step: drain
  - step: items
    loop: {in: "{{ [1, 2, 3] }}", iterator: item, spec: {mode: parallel, max_in_flight: 2}}
    tool:
      kind: python
      input: {value: "{{ item }}"}
      code: |
        # `{{ }}` in python code is a set display, never a template
        pairs = {{1, 2}} if False else {}
        result = {"value": value}
    set: {total: "{{ output.data }}", step.last: 2, workload.seen: 3}
    next: {arcs: [{step: done, when: "{{ event.name == 'loop.done' }}"}]}
  - step: drain
    loop:
      cursor:
        kind: postgres
        auth: pg
        claim: "UPDATE q SET s = 'c' RETURNING id LIMIT {{ __frame_max_rows }}"
      iterator: row
      spec: {mode: cursor, max_in_flight: "{{ slots }}", frame: {max_rows: 10}}
    tool:
      kind: postgres
      auth: "{{ pg_auth }}"
      command: "INSERT INTO t VALUES ({{ row.id }})"
      spec:
        policy:
          rules: [{when: "{{ output.status == 'error' }}", then: {do: jump, to: drain_task}}]
    next: {arcs: [{step: done}]}
  - step: done
    tool: {kind: workbook, name: score}
    next: {arcs: [{step: child}]}
  - step: child
    tool: {kind: playbook, path: tests/child, return_step: end, input: {x: 1}}
    next: {arcs: [{step: report}]}
  - step: report
    tool: {kind: duckdb, query: "SELECT 1"}
"""


def test_valid_playbook_has_no_problems() -> None:
    report = validate_text(VALID, file="valid.yaml")
    assert report.problems == []
    assert report.ok
    assert isinstance(report.playbook, Playbook)
    assert report.playbook.entry_step == "start"
    assert [s.step for s in report.playbook.workflow][:2] == ["start", "items"]


def test_load_playbook_returns_the_model() -> None:
    playbook = load_playbook(VALID)
    assert playbook.metadata.name == "valid"
    assert playbook.step("drain").loop is not None


FOUR_MISTAKES = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  path: x
workflow:
  - step: start
    tool:
      kind: python
      code: "return 1 +"
    next:
      arcs:
        - step: nowhere
  - step: loop
    tool: {kind: noop}
    loop: {in: [1], iterator: i, spec: {mode: eager}}
"""


def test_every_problem_is_reported_together() -> None:
    report = validate_text(FOUR_MISTAKES, file="four.yaml")
    found = {(p.line, p.step, p.field) for p in report.errors}
    assert found == {
        (3, None, "metadata.name"),  # schema: required field
        (9, "start", "tool.code"),  # python syntax
        (12, "start", "next.arcs[0].step"),  # unknown arc target
        (15, "loop", "loop.spec.mode"),  # schema: enum
    }
    assert len(report.errors) == 4
    assert report.playbook is None
    assert [p.line for p in report.problems] == sorted(p.line or 0 for p in report.problems)


def test_load_playbook_raises_with_located_problems() -> None:
    with pytest.raises(PlaybookInvalid) as caught:
        load_playbook(FOUR_MISTAKES, file="four.yaml")
    assert len(caught.value.problems) == 4
    text = str(caught.value)
    assert "four.yaml:3: field 'metadata.name'" in text
    assert "four.yaml:12: step 'start': field 'next.arcs[0].step'" in text


def test_load_playbook_raises_on_yaml_error() -> None:
    with pytest.raises(PlaybookInvalid, match=r"bad\.yaml:2: YAML syntax error"):
        load_playbook("a: [1\nb: 2\n", file="bad.yaml")


def test_schema_and_semantic_checks_both_run_on_a_broken_document() -> None:
    # the model fails on `kind`; the per-step checks still find the misspelled tool
    text = VALID.replace("kind: Playbook", "kind: Workflow").replace(
        'tool: {kind: duckdb, query: "SELECT 1"}', 'tol: {kind: duckdb, query: "SELECT 1"}'
    )
    report = validate_text(text)
    fields = sorted(p.field or "" for p in report.errors)
    assert fields == ["kind", "tool"]


def test_one_union_mistake_gives_one_problem() -> None:
    text = VALID.replace('tool: {kind: duckdb, query: "SELECT 1"}', "tool: 42")
    report = validate_text(text)
    assert [p.message for p in report.errors] == [
        "`tool` must be a mapping with `kind:` (one tool) or a list of such mappings "
        "(a pipeline), not a number"
    ]


def test_report_properties() -> None:
    report = ValidationReport(playbook=None, problems=[])
    assert report.ok
    assert report.errors == []
    assert report.warnings == []


def test_validate_file_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "pb.yaml"
    path.write_text(VALID, encoding="utf-8")
    report = validate_file(path)
    assert report.ok
    assert report.playbook is not None


def test_validate_file_names_the_file_in_problems(tmp_path: Path) -> None:
    path = tmp_path / "pb.yaml"
    path.write_text(FOUR_MISTAKES, encoding="utf-8")
    report = validate_file(str(path))
    assert {p.file for p in report.problems} == {str(path)}


def test_unreadable_file_is_one_problem(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    report = validate_file(missing)
    assert len(report.problems) == 1
    problem = report.problems[0]
    assert str(problem) == f"{missing}: cannot read the playbook file: No such file or directory"
    assert problem.file == str(missing)
    assert not report.ok


def test_non_utf8_file_is_one_problem(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    report = validate_file(path)
    assert len(report.errors) == 1
    assert str(report.errors[0]) == (
        f"{path}: not UTF-8 text (byte 0xe9 at offset 9); save the playbook as UTF-8"
    )


# --- yaml_positions -----------------------------------------------------------------------


def test_line_of_falls_back_to_the_deepest_existing_node() -> None:
    document = parse_yaml("a:\n  b:\n    - x\n    - y: 1\n")
    assert document is not None
    assert document.line_of(("a",)) == 1
    assert document.line_of(("a", "b", 1, "y")) == 4
    assert document.line_of(("a", "b", 1, "missing", "deeper")) == 4
    assert document.line_of(("nothing",)) == 1


def test_text_line_inside_block_scalar() -> None:
    document = parse_yaml("x: 1\ncode: |\n  a = 1\n  b = (\n")
    assert document is not None
    assert document.text_line(("code",), 2) == 4


def test_merge_keys_are_not_duplicates() -> None:
    document = parse_yaml("base: &b {x: 1}\nuse:\n  <<: *b\n  x: 2\n")
    assert document is not None
    assert document.duplicate_keys == []
    assert document.data["use"] == {"x": 2}


def test_empty_document_is_none() -> None:
    assert parse_yaml("# comment only\n") is None


def test_syntax_error_has_a_line() -> None:
    with pytest.raises(YamlSyntaxError) as caught:
        parse_yaml("a: 1\nb: [\n")
    assert caught.value.line == 3
