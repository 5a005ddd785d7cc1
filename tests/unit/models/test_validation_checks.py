"""Table-driven tests: one playbook mistake -> one located problem.

Each case is a small playbook; the line the problem must point at is marked with `# <--`
(or given explicitly when a comment cannot sit on that line).
"""

from __future__ import annotations

from textwrap import dedent, indent

import pytest

from noetl_celery.errors import Problem
from noetl_celery.models.validation import validate_text

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: t\n"
MARK = "# <--"


def pb(steps: str, top: str = "") -> str:
    """A playbook with the standard head, optional top-level keys and the given steps."""
    body = indent(dedent(steps).lstrip("\n"), "  ")
    return HEAD + dedent(top).lstrip("\n") + "workflow:\n" + body


def marked_line(text: str) -> int:
    lines = [n for n, line in enumerate(text.splitlines(), start=1) if MARK in line]
    assert len(lines) == 1, "a case needs exactly one `# <--` marker or an explicit line"
    return lines[0]


def case(
    case_id: str,
    text: str,
    fragment: str,
    step: str | None,
    field: str | None,
    severity: str = "error",
    line: int | None = None,
) -> object:
    return pytest.param(text, fragment, line, step, field, severity, id=case_id)


NOOP = "- step: start\n  tool: {kind: noop}\n"

# A table reads best one case per block; keep the formatter from exploding it.
# fmt: off
CASES = [
    # --- 1. YAML itself ---------------------------------------------------------------------
    case("yaml-syntax", "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: [t\n",
         "YAML syntax error", None, None, line=4),
    case("yaml-bad-indent", "a: 1\n b: 2\n", "YAML syntax error", None, None, line=2),
    case("yaml-two-documents", HEAD + "---\n" + HEAD, "more than one YAML document", None,
         None, line=5),
    case("yaml-python-tag", "x: !!python/object:os.system y\n", "plain YAML only", None, None,
         line=1),
    case("not-a-mapping", "- step: a\n", "must be a YAML mapping", None, None, line=1),
    case("empty", "", "is empty", None, None, line=1),
    case("only-comments", "# nothing here\n", "is empty", None, None, line=1),
    # --- 2. schema (pydantic) ---------------------------------------------------------------
    case("missing-metadata-name",
         "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {path: x}  # <--\n"
         "workflow:\n" + indent(NOOP, "  "),
         "`metadata.name` is required", None, "metadata.name"),
    case("empty-workflow", HEAD + "workflow: []  # <--\n", "`workflow` is empty", None,
         "workflow"),
    case("missing-workflow", HEAD, "`workflow` is required", None, "workflow", line=1),
    case("wrong-kind", "apiVersion: noetl.io/v2\nkind: Playbok  # <--\nmetadata: {name: t}\n"
         "workflow:\n" + indent(NOOP, "  "),
         "`kind` must be `Playbook`", None, "kind"),
    case("bad-loop-mode", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            in: [1]
            iterator: i
            spec: {mode: fast}  # <--
        """), "`mode: fast` is not allowed", "a", "loop.spec.mode"),
    case("quarantine-outside-a-loop", pb("""
        - step: a
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - then:
                      do: quarantine  # <--
        """), "this step has no `loop`, so it fails the step as `do: fail` would", "a",
         "tool.spec.policy.rules[0].then.do", "warning"),
    case("bad-on-item-error", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            in: [1]
            iterator: i
            spec: {on_item_error: skip}  # <--
        """), "`on_item_error: skip` is not allowed; use one of 'fail' or 'quarantine'", "a",
         "loop.spec.on_item_error"),
    case("non-positive-max-in-flight", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            in: [1]
            iterator: i
            spec:
              mode: parallel
              max_in_flight: 0  # <--
        """), "max_in_flight must be a positive integer", "a", "loop.spec.max_in_flight"),
    case("non-positive-step-timeout", pb("""
        - step: a
          tool: {kind: noop}
          spec:
            timeout: -5  # <--
        """), "a step timeout must be above 0 seconds, not -5", "a", "spec.timeout"),
    case("next-on-no-match", pb("""
        - step: a
          tool: {kind: noop}
          next:
            spec:
              on_no_match: end  # <--
            arcs: [{step: a, when: "{{ false }}"}]
        """), "`on_no_match: end` is not allowed; use one of 'complete' or 'quiet'", "a",
         "next.spec.on_no_match"),
    case("step-timeout-not-a-duration", pb("""
        - step: a
          tool: {kind: noop}
          spec:
            timeout: 30x  # <--
        """), "'30x' is not a duration: use a number of seconds or 500ms, 30s, 5m, 2h", "a",
         "spec.timeout"),
    case("zero-step-timeout-string", pb("""
        - step: a
          tool: {kind: noop}
          spec:
            timeout: 0ms  # <--
        """), "a step timeout must be above 0 seconds, not '0ms'", "a", "spec.timeout"),
    case("tool-spec-timeout-not-a-duration", pb("""
        - step: a
          tool:
            kind: http
            url: http://h
            spec:
              timeout: soon  # <--
        """), "'soon' is not a duration: use a number of seconds", "a", "tool.spec.timeout"),
    case("tool-timeout-not-a-duration", pb("""
        - step: a
          tool:
            kind: python
            code: "result = 1"
            timeout: 5 minutes  # <--
        """), "'5 minutes' is not a duration", "a", "tool.timeout"),
    case("retry-delay-not-a-duration", pb("""
        - step: a
          tool:
            kind: http
            url: http://h
            spec:
              policy:
                rules:
                  - then: {do: retry, delay: 2x}  # <--
        """), "'2x' is not a duration", "a", "tool.spec.policy.rules[0].then.delay"),
    case("fractional-max-in-flight", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            in: [1]
            iterator: i
            spec:
              mode: parallel
              max_in_flight: 1.5  # <--
        """), "positive integer (or a template), not a number", "a",
         "loop.spec.max_in_flight"),
    case("policy-do", pb("""
        - step: a
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - then:
                      do: again  # <--
        """), "`do: again` is not allowed; use one of 'continue', 'retry'", "a",
         "tool.spec.policy.rules[0].then.do"),
    case("policy-backoff", pb("""
        - step: a
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - then:
                      do: retry
                      backoff: random  # <--
        """), "`backoff: random` is not allowed", "a",
         "tool.spec.policy.rules[0].then.backoff"),
    case("policy-attempts", pb("""
        - step: a
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - then:
                      do: retry
                      attempts: 0  # <--
        """), "`attempts` must be at least 1", "a", "tool.spec.policy.rules[0].then.attempts"),
    case("jump-without-to", pb("""
        - step: a
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - then: {do: jump}  # <--
        """), "`do: jump` needs `to: <task label>`", "a", "tool.spec.policy.rules[0].then"),
    case("rule-without-then", pb("""
        - step: a
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - when: "{{ output.ok }}"  # <--
        """), "a rule with `when` and no `then` fails the task when it matches", "a",
         "tool.spec.policy.rules[0]", "warning"),
    case("rule-expr", pb("""
        - step: a
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - then: {do: continue}
                    expr: x  # <--
        """), "rule `expr` is not supported", "a", "tool.spec.policy.rules[0].expr"),
    case("then-unknown-key", pb("""
        - step: a
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - then:
                      do: retry
                      max_attempts: 3  # <--
        """), "unknown key `max_attempts` in `then`; allowed keys: `do`, `attempts`", "a",
         "tool.spec.policy.rules[0].then.max_attempts"),
    case("next-string", pb("""
        - step: a
          tool: {kind: noop}
          next: b  # <--
        - step: b
          tool: {kind: noop}
        """), "`next` must be a mapping with `arcs:`", "a", "next"),
    case("next-list", pb("""
        - step: a
          tool: {kind: noop}
          next: [b]  # <--
        - step: b
          tool: {kind: noop}
        """), "`next` must be a mapping with `arcs:`", "a", "next"),
    case("next-without-arcs", pb("""
        - step: a
          tool: {kind: noop}
          next: {spec: {mode: exclusive}}  # <--
        """), "`next` needs `arcs:`", "a", "next.arcs"),
    case("arc-without-step", pb("""
        - step: a
          tool: {kind: noop}
          next:
            arcs:
              - when: "{{ true }}"  # <--
        """), "each arc needs `step: <target step name>`", "a", "next.arcs[0].step"),
    case("arc-args", pb("""
        - step: a
          tool: {kind: noop}
          next:
            arcs:
              - step: a
                args: {x: 1}  # <--
        """), "arc `args` is not supported", "a", "next.arcs[0].args"),
    # NoETL ignores other unknown arc keys: a warning, and the arc still routes
    case("arc-cond-ignored", pb("""
        - step: a
          tool: {kind: noop}
          next:
            arcs:
              - step: a
                cond: exit_code == 0  # <--
        """), "an arc's condition is `when:` (as written, the arc is always taken)", "a",
        "next.arcs[0].cond", "warning"),
    case("arc-key-typo", pb("""
        - step: a
          tool: {kind: noop}
          next:
            arcs:
              - step: a
                whne: "{{ true }}"  # <--
        """), "is ignored (NoETL ignores it too); allowed keys: `step`, `when`, `set`, `spec`; "
        "did you mean `when`?", "a", "next.arcs[0].whne", "warning"),
    case("tool-string", pb("""
        - step: a
          tool: python  # <--
        """), "`tool` must be a mapping with `kind:` (one tool) or a list", "a", "tool"),
    case("tool-without-kind", pb("""
        - step: a
          tool:  # <--
            code: "x = 1"
        """), "the tool needs `kind:`", "a", "tool.kind"),
    case("pipeline-task-without-kind", pb("""
        - step: a
          tool:
            - kind: noop
            - name: second  # <--
        """), "the tool needs `kind:`", "a", "tool[1].kind"),
    case("pipeline-label-sugar", pb("""
        - step: a
          tool:
            - fetch: {kind: noop}  # <--
        """), "the `- <label>: {kind: ...}` form is not supported", "a", "tool[0].kind"),
    case("step-without-name", pb("""
        - desc: no name  # <--
          tool: {kind: noop}
        """), "every workflow item needs `step: <unique name>`", None, "workflow[0].step"),
    case("workflow-item-not-mapping", pb("""
        - just a string  # <--
        """), "each `workflow` item must be a mapping", None, "workflow[0]"),
    case("loop-mode-misplaced", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            in: [1]
            iterator: i
            mode: parallel  # <--
        """), "`mode` belongs under `loop.spec`", "a", "loop.mode"),
    case("loop-without-iterator", pb("""
        - step: a
          tool: {kind: noop}
          loop:  # <--
            in: [1]
        """), "`loop` needs `iterator: <name>`", "a", "loop.iterator"),
    # --- 3. document keys -------------------------------------------------------------------
    case("api-version", "apiVersion: noetl.io/v1  # <--\nkind: Playbook\nmetadata: {name: t}\n"
         "workflow:\n" + indent(NOOP, "  "),
         "`apiVersion: noetl.io/v1` is not supported", None, "apiVersion"),
    case("root-vars", pb(NOOP, top="vars:  # <--\n  a: 1\n"),
         "put default inputs under `workload:`", None, "vars"),
    case("unknown-top-level", pb(NOOP, top="extras: 1  # <--\n"),
         "unknown top-level key `extras` is ignored", None, "extras", "warning"),
    # --- 4. step names ----------------------------------------------------------------------
    case("duplicate-step", pb("""
        - step: a
          tool: {kind: noop}
        - step: a  # <--
          tool: {kind: noop}
        """), "step name `a` is already used on line 6", "a", "step"),
    case("colon-in-name", pb("""
        - step: a:b  # <--
          tool: {kind: noop}
        """), "contains `:`, which is reserved", "a:b", "step"),
    # --- 5. tool required -------------------------------------------------------------------
    case("misspelled-tool", pb("""
        - step: a  # <--
          tol: {kind: noop}
        """), "`tol` looks like a misspelling of `tool`", "a", "tool"),
    case("tool-fields-at-step-level", pb("""
        - step: a  # <--
          kind: python
          code: "result = 1"
        """), "indent `kind` and the tool's fields under `tool:`", "a", "tool"),
    case("empty-pipeline", pb("""
        - step: a
          tool: []  # <--
        """), "`tool` is an empty list", "a", "tool"),
    # --- 6. step keys -----------------------------------------------------------------------
    *[
        case(f"rejected-{key}", pb(f"""
            - step: a
              tool: {{kind: noop}}
              {key}: {{x: 1}}  # <--
            """), f"step key `{key}` is not supported (NoETL rejects it too)", "a", key)
        for key in ("args", "set_ctx", "set_iter", "result", "outcome")
    ],
    *[
        case(f"step-level-{key}", pb(f"""
            - step: a
              tool: {{kind: noop}}
              {key}: x  # <--
            """), "arcs (`next.arcs[].when`)", "a", key)
        for key in ("case", "type")
    ],
    case("step-when-not-a-condition", pb("""
        - step: a
          tool: {kind: noop}
          when: {x: 1}  # <--
        """), "a step's `when` is a template or a boolean, not dict", "a", "when"),
    case("single-tool-set", pb("""
        - step: a
          tool:
            kind: noop
            set: {x: 1}  # <--
        """), "a single tool has none: it is ignored", "a", "tool.set", "warning"),
    case("on-error-unknown", pb("""
        - step: a
          tool: {kind: noop}
          spec: {on_error: ignore}  # <--
        """), "`spec.on_error` is one of fail, continue, retry, not 'ignore'", "a",
        "spec.on_error"),
    case("step-skipped-needs-a-guard", pb("""
        - step: a
          tool: {kind: noop}
          next:
            arcs:
              - step: b
                when: "{{ event.name == 'step.skipped' }}"  # <--
        - step: b
          tool: {kind: noop}
        """), "an event arcs never see", "a", "next.arcs[0].when", "warning"),
    case("step-when-syntax", pb("""
        - step: a
          tool: {kind: noop}
          when: "{{ x == }}"  # <--
        """), "template syntax error in `when`", "a", "when"),
    case("unknown-step-key", pb("""
        - step: a
          tool: {kind: noop}
          output: {store: memory}  # <--
        """), "unknown step key `output` is ignored", "a", "output", "warning"),
    case("step-vars", pb("""
        - step: a
          tool: {kind: noop}
          vars: {x: 1}  # <--
        """), "unknown step key `vars` is ignored", "a", "vars", "warning"),
    case("stray-command", pb("""
        - step: a
          tool: {kind: noop}
          command: select 1  # <--
        """), "it belongs inside `tool:`", "a", "command", "warning"),
    case("stray-code", pb("""
        - step: a
          tool: {kind: noop}
          code: x = 1  # <--
        """), "it belongs inside `tool:`", "a", "code", "warning"),
    # --- 7. tool kinds and their fields -----------------------------------------------------
    case("unknown-kind", pb("""
        - step: a
          tool:
            kind: bash  # <--
        """), "`kind: bash` is not a tool kind; use one of: artifact, duckdb, http, noop", "a",
         "tool.kind"),
    case("unsupported-noetl-kind", pb("""
        - step: a
          tool:
            kind: snowflake  # <--
        """), "`kind: snowflake` is a NoETL tool kind that noetl-celery does not run; the "
         "playbook runs, and fails when this step is reached", "a", "tool.kind", "warning"),
    *[
        case(f"noetl-kind-{kind}", pb(f"""
            - step: a
              tool:
                kind: {kind}  # <--
                {extra}
            """), f"`kind: {kind}` is a NoETL tool kind that noetl-celery does not run",
             "a", "tool.kind", "warning")
        for kind, extra in [
            ("subscription", "source: {type: nats, subject: s}"),
            ("wasm", "plugin: {path: plugins/x, version: 1}"),
            ("provider", "provider: gcp"),
            ("shell", "command: echo hi"),
            ("mcp", "server: x"),
            ("container", "image: busybox"),
            ("transfer", "source: {kind: http}"),
            ("result_fetch", "ref: r"),
            ("ducklake", "catalog: c"),
            ("agent", "model: m"),
        ]
    ],
    case("kind-typo-did-you-mean", pb("""
        - step: a
          tool:
            kind: pythn  # <--
        """), "`kind: pythn` is not a tool kind; did you mean `python`?", "a", "tool.kind"),
    case("kind-typo-of-a-noetl-kind", pb("""
        - step: a
          tool:
            kind: snowflak  # <--
        """), "did you mean `snowflake`?", "a", "tool.kind"),
    case("artifact-put", pb("""
        - step: a
          tool:
            kind: artifact
            action: put  # <--
            input: {result_ref: x}
        """), "`action: put` is not supported; an artifact tool only does `get`", "a",
        "tool.action"),
    case("python-without-code", pb("""
        - step: a
          tool:  # <--
            kind: python
        """), "a python tool needs `code:`", "a", "tool.code"),
    case("python-script-gcs", pb("""
        - step: a
          tool:
            kind: python
            script:
              uri: gs://x/y.py
              source:  # <--
                type: gcs
        """), "script source 'gcs' is not supported by noetl-celery", "a", "tool.script.source",
         "warning"),
    case("postgres-script-s3-guessed", pb("""
        - step: a
          tool:
            kind: postgres
            auth: pg
            script: {uri: "s3://b/x.sql"}  # <--
        """), "script source 's3' is not supported", "a", "tool.script.source", "warning"),
    case("python-script-inline-type", pb("""
        - step: a
          tool:
            kind: python
            script:
              uri: inline
              source:  # <--
                type: inline
        """), "an inline script needs its code as text in `source.code`",
         "a", "tool.script.source.code"),
    case("duckdb-script-without-uri", pb("""
        - step: a
          tool:
            kind: duckdb
            script:  # <--
              source: {type: file}
        """), "a file script needs `uri`", "a", "tool.script.uri"),
    case("python-script-bad-method", pb("""
        - step: a
          tool:
            kind: python
            script:
              uri: http://h/x.py
              source:
                type: http
                method: FETCH  # <--
        """), "script source method 'FETCH' is not one of GET", "a",
         "tool.script.source.method"),
    case("python-script-and-code", pb("""
        - step: a
          tool:
            kind: python
            script: {uri: ./x.py}
            code: "result = 1"  # <--
        """), "`code` is ignored: `script` takes priority", "a", "tool.code", "warning"),
    case("python-bad-base64", pb("""
        - step: a
          tool:
            kind: python
            code_b64: "not base64!"  # <--
        """), "not valid base64", "a", "tool.code_b64"),
    case("http-without-url", pb("""
        - step: a
          tool:  # <--
            kind: http
            method: GET
        """), "an http tool needs `url:`", "a", "tool.url"),
    case("http-url-under-spec", pb("""
        - step: a
          tool:  # <--
            kind: http
            spec: {method: GET, url: "http://127.0.0.1:1/x"}
        """), "this tool has `url` under `spec:`, which neither engine reads: move `url`", "a",
        "tool.url"),
    case("python-code-under-spec", pb("""
        - step: a
          tool:  # <--
            kind: python
            spec: {code: "result = 1"}
        """), "move `code` (and the other tool fields) up to `tool.code`", "a", "tool.code"),
    case("postgres-without-auth", pb("""
        - step: a
          tool:  # <--
            kind: postgres
            command: select 1
        """), "a postgres tool needs `auth: <credential name>`", "a", "tool.auth"),
    case("postgres-legacy-credential", pb("""
        - step: a
          tool:
            kind: postgres
            credential: pg  # <--
            command: select 1
        """), "`credential:` is NoETL's legacy spelling of `auth:` (deprecated)", "a",
         "tool.credential", "warning"),
    case("postgres-without-sql", pb("""
        - step: a
          tool:  # <--
            kind: postgres
            auth: pg
        """), "a postgres tool needs SQL in `command:`", "a", "tool.command"),
    case("postgres-blank-sql", pb("""
        - step: a
          tool:  # <--
            kind: postgres
            auth: pg
            query: "   "
        """), "a postgres tool needs SQL", "a", "tool.command"),
    case("postgres-direct-connection", pb("""
        - step: a
          tool:
            kind: postgres
            auth: pg
            command: select 1
            db_host: localhost  # <--
        """), "`db_host` is not allowed", "a", "tool.db_host"),
    case("duckdb-without-sql", pb("""
        - step: a
          tool:  # <--
            kind: duckdb
        """), "a duckdb tool needs SQL", "a", "tool.command"),
    case("workbook-without-name", pb("""
        - step: a
          tool:  # <--
            kind: workbook
        """, top="workbook:\n  - {name: wb, tool: {kind: noop}}\n"),
         "a workbook tool needs `name:`", "a", "tool.name"),
    case("workbook-unknown-entry", pb("""
        - step: a
          tool:
            kind: workbook
            name: missing  # <--
        """, top="workbook:\n  - {name: wb, tool: {kind: noop}}\n"),
         "no `workbook` entry is named `missing`; entries: `wb`", "a", "tool.name"),
    case("workbook-without-section", pb("""
        - step: a
          tool:
            kind: workbook
            name: wb  # <--
        """), "entries: none: add a `workbook:` list", "a", "tool.name"),
    case("workbook-pipeline-task", pb("""
        - step: a
          tool:
            - name: call
              kind: workbook
              task: other  # <--
        """, top="workbook:\n  - {name: wb, tool: {kind: noop}}\n"),
         "no `workbook` entry is named `other`", "a", "tool[0].task"),
    case("workbook-entry-tool", pb(NOOP, top="""
        workbook:
          - name: wb
            tool:  # <--
              kind: http
        """), "an http tool needs `url:`", None, "workbook[0].tool.url"),
    case("workbook-duplicate", pb(NOOP, top="""
        workbook:
          - {name: wb, tool: {kind: noop}}
          - {name: wb, tool: {kind: noop}}  # <--
        """), "workbook entry `wb` is defined twice", None, "workbook[1].name"),
    case("workbook-playbook-without-path-never-called", pb(NOOP, top="""
        workbook:
          - name: wb
            tool:  # <--
              kind: playbook
        """), "a playbook tool needs `path:` (the catalog path to run); no step calls this "
         "entry yet", None, "workbook[0].tool.path", "warning"),
    case("workbook-playbook-without-path-called", pb("""
        - step: a
          tool: {kind: workbook, name: wb}
        """, top="""
        workbook:
          - name: wb
            tool:  # <--
              kind: playbook
        """), "a playbook tool needs `path:` (the catalog path to run)", None,
         "workbook[0].tool.path"),
    case("playbook-without-path", pb("""
        - step: a
          tool:  # <--
            kind: playbook
            return_step: end
        """), "a playbook tool needs `path:`", "a", "tool.path"),
    # --- 8. python syntax -------------------------------------------------------------------
    case("python-return-in-class", pb("""
        - step: a
          tool:
            kind: python
            code: |
              class A:
                  return 1  # <--
        """), "'return' outside function (line 2 of the code)", "a", "tool.code"),
    case("python-syntax-warning", pb(r"""
        - step: a
          tool:
            kind: python
            code: |
              import re
              pattern = re.compile("\d+")  # <--
        """), "python code, line 2: invalid escape sequence '\\d'", "a", "tool.code",
         "warning"),
    case("python-syntax-in-pipeline", pb("""
        - step: a
          tool:
            - name: t
              kind: python
              code: "def f(:"  # <--
        """), "python code does not compile", "a", "tool[0].code"),
    case("python-in-workbook", pb(NOOP, top="""
        workbook:
          - name: wb
            tool:
              kind: python
              code: |
                if x  # <--
        """), "python code does not compile: expected ':'", None, "workbook[0].tool.code"),
    # --- 9. templates -----------------------------------------------------------------------
    case("template-tool-field", pb("""
        - step: a
          tool:
            kind: http
            url: "{{ base }/x"  # <--
        """), "template syntax error in `url`", "a", "tool.url"),
    case("template-sql-block", pb("""
        - step: a
          tool:
            kind: postgres
            auth: pg
            command: |
              select 1;
              select {% if x %} 2;
        """), "template syntax error in `command`", "a", "tool.command", line=12),
    case("template-input", pb("""
        - step: a
          tool: {kind: noop}
          input:
            x: "{{ a | }}"  # <--
        """), "template syntax error in `x`", "a", "input.x"),
    case("template-step-set", pb("""
        - step: a
          tool: {kind: noop}
          set:
            ctx.x: "{{ a b }}"  # <--
        """), "template syntax error in `ctx.x`", "a", "set.ctx.x"),
    case("template-arc-when", pb("""
        - step: a
          tool: {kind: noop}
          next:
            arcs:
              - step: a
                when: "{{ x == }}"  # <--
        """), "template syntax error in `when`", "a", "next.arcs[0].when"),
    case("template-arc-set", pb("""
        - step: a
          tool: {kind: noop}
          next:
            arcs:
              - step: a
                set: {ctx.n: "{{ n + }}"}  # <--
        """), "template syntax error in `ctx.n`", "a", "next.arcs[0].set.ctx.n"),
    case("template-loop-in", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            in: "{{ rows[0 }}"  # <--
            iterator: r
        """), "template syntax error in `in`", "a", "loop.in"),
    case("template-cursor-claim", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            cursor:
              auth: pg
              claim: "select * from q limit {{ __frame_max_rows }"  # <--
            iterator: r
            spec: {mode: cursor}
        """), "template syntax error in `claim`", "a", "loop.cursor.claim"),
    case("template-policy-when", pb("""
        - step: a
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - when: "{% if %}"  # <--
                    then: {do: continue}
        """), "template syntax error in `when`", "a", "tool.spec.policy.rules[0].when"),
    case("template-policy-set", pb("""
        - step: a
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - then:
                      do: continue
                      set: {iter.p: "{{ iter.p + }}"}  # <--
        """), "template syntax error in `iter.p`", "a",
         "tool.spec.policy.rules[0].then.set.iter.p"),
    # --- 10. pipelines ----------------------------------------------------------------------
    case("duplicate-task-label", pb("""
        - step: a
          tool:
            - name: t
              kind: noop
            - name: t  # <--
              kind: noop
        """), "task label `t` is used twice", "a", "tool[1].name"),
    case("jump-unknown-label", pb("""
        - step: a
          tool:
            - name: first
              kind: noop
            - name: second
              kind: noop
              spec:
                policy:
                  rules:
                    - then:
                        do: jump
                        to: third  # <--
        """), "`jump` target `third` is not a task of this pipeline; use one of `first`, "
         "`second` or `previous`", "a", "tool[1].spec.policy.rules[0].then.to"),
    case("jump-single-tool", pb("""
        - step: a
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - then:
                      do: jump
                      to: b_task  # <--
        """), "use one of `a_task` or `previous`", "a", "tool.spec.policy.rules[0].then.to"),
    # --- 11. arcs ---------------------------------------------------------------------------
    case("arc-unknown-step", pb("""
        - step: start
          tool: {kind: noop}
          next:
            arcs:
              - step: strat  # <--
        """), "names step `strat`, which does not exist; did you mean `start`?", "start",
         "next.arcs[0].step"),
    case("arc-when-number", pb("""
        - step: a
          tool: {kind: noop}
          next:
            arcs:
              - step: a
                when: 1  # <--
        """), "`when` must be a Jinja string", "a", "next.arcs[0].when"),
    case("arc-when-list", pb("""
        - step: a
          tool: {kind: noop}
          next:
            arcs:
              - step: a
                when: [x]  # <--
        """), "`when` must be a Jinja string", "a", "next.arcs[0].when"),
    case("rule-when-mapping", pb("""
        - step: a
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - when: {a: 1}  # <--
                    then: {do: continue}
        """), "`when` must be a Jinja string", "a", "tool.spec.policy.rules[0].when"),
    case("arc-when-constant", pb("""
        - step: a
          tool: {kind: noop}
          next:
            arcs:
              - step: a
                when: x > 1  # <--
        """), "constant string that always counts as true", "a", "next.arcs[0].when",
         "warning"),
    # --- 12. executor -----------------------------------------------------------------------
    case("entry-step", pb(NOOP, top="executor:\n  spec:\n    entry_step: begin  # <--\n"),
         "`entry_step` names step `begin`, which does not exist", None,
         "executor.spec.entry_step"),
    case("final-step", pb(NOOP, top="executor:\n  spec:\n    final_step: end  # <--\n"),
         "`final_step` names step `end`", None, "executor.spec.final_step"),
    # --- 13. loops --------------------------------------------------------------------------
    case("loop-without-source", pb("""
        - step: a
          tool: {kind: noop}
          loop:  # <--
            iterator: i
        """), "`loop` needs `in:`", "a", "loop.in"),
    case("loop-in-and-cursor", pb("""
        - step: a
          tool: {kind: noop}
          loop:  # <--
            in: [1]
            cursor: {claim: select 1}
            iterator: i
            spec: {mode: cursor}
        """), "takes `in:` or `cursor:`, not both", "a", "loop"),
    case("cursor-without-mode", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            cursor: {claim: select 1}
            iterator: i
            spec:
              mode: parallel  # <--
        """), "a `cursor:` loop needs `spec: {mode: cursor}`", "a", "loop.spec.mode"),
    case("mode-cursor-without-cursor", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            in: [1]
            iterator: i
            spec:
              mode: cursor  # <--
        """), "`mode: cursor` needs `loop.cursor`", "a", "loop.spec.mode"),
    case("cursor-without-claim", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            cursor:  # <--
              auth: pg
            iterator: i
            spec: {mode: cursor}
        """), "`loop.cursor` needs `claim:` SQL", "a", "loop.cursor.claim"),
    case("cursor-blank-claim", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            cursor:
              claim: ""  # <--
            iterator: i
            spec: {mode: cursor}
        """), "`claim` is empty", "a", "loop.cursor.claim"),
    case("cursor-kind", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            cursor:
              kind: redis  # <--
              claim: x
            iterator: i
            spec: {mode: cursor}
        """), "cursor `kind: redis` is not supported", "a", "loop.cursor.kind"),
    case("iterator-not-a-name", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            in: [1]
            iterator: my item  # <--
        """), "must be a plain name", "a", "loop.iterator"),
    case("sequential-max-in-flight", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            in: [1]
            iterator: i
            spec:
              mode: sequential
              max_in_flight: 4  # <--
        """), "`max_in_flight` is ignored: a sequential loop runs one item at a time", "a",
         "loop.spec.max_in_flight", "warning"),
    case("default-mode-max-in-flight", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            in: [1]
            iterator: i
            spec:
              max_in_flight: 4  # <--
        """), "`max_in_flight` is ignored", "a", "loop.spec.max_in_flight", "warning"),
    case("frame-without-cursor", pb("""
        - step: a
          tool: {kind: noop}
          loop:
            in: [1]
            iterator: i
            spec:
              frame: {max_rows: 5}  # <--
        """), "`frame` is only used by cursor loops", "a", "loop.spec.frame", "warning"),
    # --- 14. set keys -----------------------------------------------------------------------
    case("set-unknown-scope", pb("""
        - step: a
          tool: {kind: noop}
          set:
            foo.bar: 1  # <--
        """), "`set` key `foo.bar` has an unknown scope `foo`", "a", "set.foo.bar", "warning"),
    case("set-empty-key", pb("""
        - step: a
          tool: {kind: noop}
          set:
            "": 1  # <--
        """), "a `set` key is empty", "a", "set.", "warning"),
    case("set-scope-without-name", pb("""
        - step: a
          tool: {kind: noop}
          set:
            ctx.: 1  # <--
        """), "`set` key `ctx.` names no variable", "a", "set.ctx.", "warning"),
    case("arc-set-key", pb("""
        - step: a
          tool: {kind: noop}
          next:
            arcs:
              - step: a
                set: {batch.n: 1}  # <--
        """), "unknown scope `batch`", "a", "next.arcs[0].set.batch.n", "warning"),
    case("policy-set-key", pb("""
        - step: a
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - then:
                      do: continue
                      set: {"page size": 1}  # <--
        """), "`set` key `page size` is not a plain name", "a",
         "tool.spec.policy.rules[0].then.set.page size", "warning"),
    # --- 15. keychain -----------------------------------------------------------------------
    case("keychain-cloud-kind", pb(NOOP, top="""
        keychain:
          - {name: a, kind: bearer, token: t}
          - {name: b, kind: secret_manager, provider: gcp, map: {k: p}}  # <--
        """), "keychain entry 'b' (kind secret_manager, provider gcp) is not supported here",
         None, "keychain[1].provider", "warning"),
    case("keychain-cloud-kind-without-provider", pb(NOOP, top="""
        keychain:
          - {name: b, kind: google_oauth}  # <--
        """), "keychain entry 'b' (kind google_oauth) is not supported here", None,
         "keychain[0].kind", "warning"),
    case("keychain-provider-without-kind", pb(NOOP, top="""
        keychain:
          - {name: v, provider: vault, map: {token: secret/data/x}}  # <--
        """), "keychain entry 'v' (provider vault) is not supported here: noetl-celery does "
         "not reach secrets from HashiCorp Vault (`provider: vault`)", None,
         "keychain[0].provider", "warning"),
    case("keychain-provider-not-a-name", pb(NOOP, top="""
        keychain:
          - {name: v, kind: static, provider: [gcp], map: {a: b}}  # <--
        """), "keychain entry 'v': `provider` must be a name", None, "keychain[0].provider"),
    case("keychain-no-name", pb(NOOP, top="""
        keychain:
          - {kind: bearer, token: t}  # <--
        """), "keychain entry #1 needs a `name`", None, "keychain[0].name"),
    case("keychain-unknown-kind", pb(NOOP, top="""
        keychain:
          - {name: a, kind: vault}  # <--
        """), "keychain entry 'a': unknown kind `vault`; use one of bearer, credential,",
         None, "keychain[0].kind"),
    case("keychain-static-no-map", pb(NOOP, top="""
        keychain:
          - {name: a, kind: static}  # <--
        """), "keychain entry 'a' (kind static) needs a `map:`", None, "keychain[0].map"),
    case("keychain-oauth2-no-endpoint", pb(NOOP, top="""
        keychain:
          - {name: a, kind: oauth2, data: {grant_type: client_credentials}}  # <--
        """), "keychain entry 'a' (kind oauth2) needs the token `endpoint:`", None,
         "keychain[0].endpoint"),
    case("keychain-bad-scope", pb(NOOP, top="""
        keychain:
          - {name: a, kind: bearer, token: t, scope: forever}  # <--
        """), "`scope: forever` is not one of global, execution", None, "keychain[0].scope"),
    case("keychain-twice", pb(NOOP, top="""
        keychain:
          - {name: a, kind: bearer, token: t}
          - {name: a, kind: bearer, token: u}  # <--
        """), "keychain entry 'a' is declared twice", None, "keychain[1].name"),
    # --- YAML duplicate keys ----------------------------------------------------------------
    case("duplicate-yaml-key", pb("""
        - step: a
          tool: {kind: noop}
          desc: one
          desc: two  # <--
        """), "`desc` is given twice in this mapping", "a", "desc", "warning"),
]
# fmt: on


@pytest.mark.parametrize(("text", "fragment", "line", "step", "field", "severity"), CASES)
def test_one_mistake_one_problem(
    text: str,
    fragment: str,
    line: int | None,
    step: str | None,
    field: str | None,
    severity: str,
) -> None:
    report = validate_text(text, file="pb.yaml")
    problems = report.problems
    assert len(problems) == 1, "\n".join(str(p) for p in problems)
    problem = problems[0]
    assert fragment in problem.message
    assert problem.severity == severity
    assert problem.file == "pb.yaml"
    assert problem.line == (line if line is not None else marked_line(text))
    assert (problem.step, problem.field) == (step, field)
    assert report.ok is (severity != "error")
    assert (report.playbook is None) is (severity == "error")


def test_warnings_do_not_reject() -> None:
    text = pb(
        """
        - step: a
          tool: {kind: noop}
          output: {x: 1}
        """,
        top="keychain: [{name: k, kind: google_oauth}]\n",
    )
    report = validate_text(text)
    assert report.ok
    assert report.errors == []
    assert len(report.warnings) == 2
    assert all(isinstance(p, Problem) for p in report.warnings)
    assert report.playbook is not None


@pytest.mark.parametrize("value", ["complete", "quiet"])
def test_on_no_match_values_validate_clean(value: str) -> None:
    text = pb(
        f"""
        - step: a
          tool: {{kind: noop}}
          next:
            spec: {{mode: exclusive, on_no_match: {value}}}
            arcs: [{{step: b, when: "{{{{ false }}}}"}}]
        - step: b
          tool: {{kind: noop}}
        """
    )
    report = validate_text(text)
    assert report.problems == []
    assert report.playbook is not None
    assert report.playbook.step("a").next.spec.on_no_match == value  # type: ignore[union-attr]


def test_durations_as_strings_validate_clean() -> None:
    text = pb(
        """
        - step: a
          spec: {timeout: 30s}
          tool:
            kind: http
            url: http://h
            timeout: "{{ workload.t }}"
            spec:
              timeout: 500ms
              policy:
                rules:
                  - then: {do: retry, delay: 1.5s, max_delay: 5m, backoff: exponential}
        - step: b
          spec: {timeout: 2h}
          tool: {kind: python, code: "result = 1", timeout: 90}
          loop:
            cursor: {kind: postgres, auth: pg, claim: "SELECT 1"}
            iterator: row
            spec: {mode: cursor, frame: {lease_seconds: 5m, heartbeat_seconds: "10s"}}
        """,
        "workload: {t: 10s}\n",
    )
    assert validate_text(text).problems == []


def test_script_forms_that_validate_clean() -> None:
    """Templated sources are checked when they are rendered, on the worker; a null
    `script` is no script; a script replaces `code`/`command` (no need for either)."""
    text = pb(
        """
        - step: a
          tool:
            kind: python
            script: {uri: "{{ workload.script_url }}"}
        - step: b
          tool:
            kind: postgres
            auth: pg
            script: {uri: x.sql, source: {type: "{{ kind }}"}}
        - step: c
          tool: {kind: python, script: null, code: "result = 1"}
        - step: d
          tool:
            kind: duckdb
            script: {uri: q.sql, source: {type: http, endpoint: "http://h/q.sql", method: get}}
        """,
        "workload: {script_url: 'https://h/s.py', kind: file}\n",
    )
    assert validate_text(text).problems == []
