"""Forms of today's NoETL DSL (issue 31), each run end to end with `noetl-celery run` in
the embedded mode: python's `input_data` and top-level `return`, durations as strings,
`next.spec.on_no_match`, NoETL kinds this engine does not run, keychain providers."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.workers import run_cli, run_json


def playbook(name: str, steps: str, top: str = "", workload: str = "{base: 10}") -> str:
    return (
        textwrap.dedent(
            f"""\
            apiVersion: noetl.io/v2
            kind: Playbook
            metadata: {{name: {name}, path: tests/noetl_forms/{name}}}
            workload: {workload}
            """
        )
        + textwrap.dedent(top)
        + "workflow:\n"
        + textwrap.indent(textwrap.dedent(steps), "  ")
    )


def run(env: dict[str, str], tmp_path: Path, text: str) -> tuple[int, Any, str]:
    file = tmp_path / "pb.yaml"
    file.write_text(text)
    return run_json(["run", str(file), "--json"], env)


def validate(env: dict[str, str], tmp_path: Path, text: str) -> tuple[int, str]:
    file = tmp_path / "pb.yaml"
    file.write_text(text)
    proc = run_cli(["validate", str(file)], env, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


PYTHON_FORMS = playbook(
    "python_forms",
    """\
    - step: start
      tool:
        kind: python
        input: {a: "{{ workload.base }}", b: 5}
        code: |
          total = input_data['a'] + input_data.get('b', 0)
          if total > 100:
              return {'total': 'too big'}
          return {'total': total, 'same': input_data == args}
      next: {arcs: [{step: legacy}]}
    - step: legacy
      tool:
        kind: python
        input: {n: "{{ start.total }}"}
        code: |
          def main(n):
              return {'doubled': n * 2}
      next: {arcs: [{step: module}]}
    - step: module
      tool:
        kind: python
        input: {n: "{{ legacy.doubled }}"}
        code: "result = {'plus_one': n + 1}"
      next: {arcs: [{step: named}]}
    - step: named
      tool:
        kind: python
        input: {input_data: "{{ start }}"}
        code: "return input_data['total'] * 10"
    """,
)


def test_python_input_data_and_top_level_return(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    code, output = validate(embedded_env, tmp_path, PYTHON_FORMS)
    assert code == 0 and "outside function" not in output, output
    code, summary, stderr = run(embedded_env, tmp_path, PYTHON_FORMS)
    assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
    assert summary["steps"]["start"] == {"total": 15, "same": True}
    assert summary["steps"]["legacy"] == {"doubled": 30}
    assert summary["steps"]["module"] == {"plus_one": 31}
    assert summary["steps"]["named"] == 150  # an input key `input_data` wins


DURATIONS = playbook(
    "durations",
    """\
    - step: start
      spec: {timeout: 30s}
      tool:
        kind: python
        timeout: "{{ workload.fast }}"
        code: "return 'quick'"
      next: {arcs: [{step: slow}]}
    - step: slow
      spec: {timeout: 1m}
      tool:
        kind: python
        timeout: 200ms
        code: |
          import time
          time.sleep(5)
        spec:
          policy:
            rules:
              - when: "{{ output.error.kind == 'timeout' }}"
                then: {do: retry, attempts: 2, delay: 100ms, max_delay: 1s}
    """,
    workload="{fast: 10s}",
)


def test_durations_as_strings(embedded_env: dict[str, str], tmp_path: Path) -> None:
    code, summary, stderr = run(embedded_env, tmp_path, DURATIONS)
    assert code == 1 and summary["status"] == "FAILED", (summary, stderr)
    assert summary["steps"]["start"] == "quick"
    [error] = summary["errors"]
    assert error["step"] == "slow" and error["kind"] == "timeout", error
    assert "timeout of 0.2s" in error["message"]
    eid = summary["execution_id"]
    events = run_cli(["events", eid, "--json", "--limit", "0"], embedded_env).stdout
    assert events.count("timeout of 0.2s") >= 2  # the retry ran, 100 ms later


def test_a_bad_duration_is_refused_naming_the_field(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    text = DURATIONS.replace("timeout: 30s", "timeout: 30x")
    code, output = validate(embedded_env, tmp_path, text)
    assert code != 0
    assert (
        "step 'start': field 'spec.timeout': '30x' is not a duration: use a number of "
        "seconds or 500ms, 30s, 5m, 2h"
    ) in output


ON_NO_MATCH = playbook(
    "on_no_match",
    """\
    - step: start
      tool: {kind: python, code: "return 'go'"}
      next:
        spec: {mode: inclusive}
        arcs: [{step: quiet_end}, {step: slow}]
    - step: quiet_end
      tool: {kind: python, code: "return 'nothing matches'"}
      next:
        spec: {mode: exclusive, on_no_match: quiet}
        arcs: [{step: never, when: "{{ workload.base > 100 }}"}]
    - step: slow
      tool:
        kind: python
        code: |
          import time
          time.sleep(1)
          return 'slow done'
      next: {arcs: [{step: after_slow}]}
    - step: after_slow
      tool: {kind: python, code: "return 'last'"}
      next:
        spec: {on_no_match: complete}
        arcs: [{step: never, when: "{{ workload.base > 100 }}"}]
    - step: never
      tool: {kind: python, code: "return 'not reached'"}
    """,
)


def test_on_no_match_quiet_and_complete(embedded_env: dict[str, str], tmp_path: Path) -> None:
    """A branch whose arcs do not match ends (`quiet`: the other branch still runs to its
    end; `complete`: the execution ends once nothing else runs), COMPLETED either way."""
    code, summary, stderr = run(embedded_env, tmp_path, ON_NO_MATCH)
    assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
    steps = summary["steps"]
    assert steps["quiet_end"] == "nothing matches" and steps["after_slow"] == "last"
    assert "never" not in steps
    # a quiet dead end with nothing else running still ends the execution
    alone = ON_NO_MATCH.replace(
        "arcs: [{step: quiet_end}, {step: slow}]", "arcs: [{step: quiet_end}]"
    )
    code, summary, stderr = run(embedded_env, tmp_path, alone)
    assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
    assert set(summary["steps"]) == {"start", "quiet_end"}


def test_on_no_match_bad_value_is_refused(embedded_env: dict[str, str], tmp_path: Path) -> None:
    code, output = validate(
        embedded_env, tmp_path, ON_NO_MATCH.replace("on_no_match: quiet", "on_no_match: stop")
    )
    assert code != 0
    assert (
        "step 'quiet_end': field 'next.spec.on_no_match': `on_no_match: stop` is not "
        "allowed; use one of 'complete' or 'quiet'"
    ) in output


NEW_KINDS = {
    "subscription": "source: {type: nats, subject: orders}",
    "wasm": "plugin: {path: plugins/score, version: 1}",
    "provider": "provider: gcp",
}


@pytest.mark.parametrize("kind", sorted(NEW_KINDS))
def test_a_noetl_kind_not_run_here_warns_then_fails_when_reached(
    embedded_env: dict[str, str], tmp_path: Path, kind: str
) -> None:
    text = playbook(
        f"kind_{kind}",
        f"""\
        - step: start
          tool: {{kind: python, code: "return {{'first': 1}}"}}
          next:
            spec: {{mode: exclusive}}
            arcs:
              - {{step: skipped, when: "{{{{ workload.base > 100 }}}}"}}
              - {{step: reached}}
        - step: skipped
          tool: {{kind: {kind}, {NEW_KINDS[kind]}}}
        - step: reached
          tool: {{kind: {kind}, {NEW_KINDS[kind]}}}
        """,
    )
    code, output = validate(embedded_env, tmp_path, text)
    assert code == 0, output
    warning = f"`kind: {kind}` is a NoETL tool kind that noetl-celery does not run"
    assert output.count(warning) == 2, output
    code, summary, stderr = run(embedded_env, tmp_path, text)
    assert code == 1 and summary["status"] == "FAILED", (summary, stderr)
    assert summary["steps"]["start"] == {"first": 1}
    [error] = summary["errors"]
    assert error["step"] == "reached", error
    assert f"kind {kind} is not supported by noetl-celery" in error["message"]
    assert "skipped" not in summary["steps"]


INLINE_AND_TOOLLESS = playbook(
    "inline_and_toolless",
    """\
    - step: start
      tool:
        kind: python
        script:
          uri: inline
          source: {type: inline, code: "{{ snippet }}"}
      next: {arcs: [{step: route}]}
    - step: route
      desc: no tool, so it runs as kind noop; its set and next apply
      set: {ctx.seen: "{{ start.value }}"}
      next: {arcs: [{step: use}]}
    - step: use
      tool:
        kind: python
        input: {seen: "{{ ctx.seen }}"}
        code: "result = {'doubled': seen * 2}"
      next: {arcs: [{step: end}]}
    - step: end
    """,
    workload="{snippet: \"result = {'value': 21}\"}",
)


def test_inline_script_source_and_steps_without_tool(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    code, output = validate(embedded_env, tmp_path, INLINE_AND_TOOLLESS)
    assert code == 0, output
    code, summary, stderr = run(embedded_env, tmp_path, INLINE_AND_TOOLLESS)
    assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
    assert summary["steps"]["start"] == {"value": 21}
    assert summary["steps"]["use"] == {"doubled": 42}
    assert "end" in summary["steps"]


def test_a_misspelled_tool_key_is_refused(embedded_env: dict[str, str], tmp_path: Path) -> None:
    text = INLINE_AND_TOOLLESS.replace("- step: end", "- step: end\n    tol: {kind: noop}")
    code, output = validate(embedded_env, tmp_path, text)
    assert code == 2 and "`tol` looks like a misspelling of `tool`" in output, output
