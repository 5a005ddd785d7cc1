"""Name checks of `validate` (models.validation.names): table-driven.

Each bad case is a small playbook with exactly one problem, on the line marked `# <--`;
each good case is a playbook that uses the same kind of reference correctly and must
come out without any problem.
"""

from __future__ import annotations

from textwrap import dedent, indent

import pytest

from noetl_celery.errors import Problem
from noetl_celery.models.validation import CredentialAliases, validate_text
from noetl_celery.models.validation.refs import template_refs

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: t\n"
MARK = "# <--"
FILE_CREDS = CredentialAliases(frozenset({"pg_local", "pg_test"}), "credentials file c.yaml")
NO_FILE = CredentialAliases(None)


def pb(steps: str, top: str = "") -> str:
    body = indent(dedent(steps).lstrip("\n"), "  ")
    return HEAD + dedent(top).lstrip("\n") + "workflow:\n" + body


def marked_line(text: str) -> int:
    lines = [n for n, line in enumerate(text.splitlines(), start=1) if MARK in line]
    assert len(lines) == 1, "a case needs exactly one `# <--` marker"
    return lines[0]


def bad(
    case_id: str,
    text: str,
    fragment: str,
    step: str | None,
    field: str,
    severity: str,
    credentials: CredentialAliases | None = None,
) -> object:
    return pytest.param(text, fragment, step, field, severity, credentials, id=case_id)


def good(case_id: str, text: str, credentials: CredentialAliases | None = None) -> object:
    return pytest.param(text, credentials, id=case_id)


LOOP = """
- step: each
  loop: {in: "{{ cities }}", iterator: city}
  tool:
    kind: python
    input: {name: "%s"}
    code: "result = {'n': name}"
"""
TOP = "workload:\n  cities: [a, b]\n  limit: 3\n"
FAN = """
        - step: fan
          loop: {in: [1, 2], iterator: x}
          tool: {kind: noop}
          next: {arcs: [{step: b}]}"""  # indented as the cases that follow it
PG = "- step: q\n  tool:\n    kind: postgres\n    %s\n    command: select 1\n"

# fmt: off
BAD = [
    # --- iterator names -----------------------------------------------------------------------
    bad("iter-not-the-iterator", pb(LOOP % "{{ iter.cty }}  # <--", TOP),
        "`iter.cty` is not defined: this loop's iterator is `city` (`iter.city`) and no `set` "
        "writes `iter.cty`; did you mean `iter.city`?", "each", "tool.input.name", "error"),
    bad("iter-item-field-without-iterator", pb(LOOP % "{{ iter.name }}  # <--", TOP),
        "use `iter.city.name` for a field of the item", "each", "tool.input.name", "error"),
    bad("iter-in-step-input", pb("""
        - step: each
          loop: {in: [1, 2], iterator: n}
          input: {v: "{{ iter.m }}"}  # <--
          tool: {kind: noop}
        """), "`iter.m` is not defined", "each", "input.v", "error"),
    bad("iter-in-step-set", pb("""
        - step: each
          loop: {in: [1, 2], iterator: n}
          tool: {kind: noop}
          set: {ctx.last: "{{ iter.x }}"}  # <--
        """), "`iter.x` is not defined", "each", "set.ctx.last", "error"),
    bad("iter-in-policy-of-loop", pb("""
        - step: each
          loop: {in: [1, 2], iterator: num}
          tool:
            kind: noop
            spec:
              policy:
                rules:
                  - when: "{{ iter.numm > 1 }}"  # <--
                    then: {do: continue}
        """), "did you mean `iter.num`?", "each", "tool.spec.policy.rules[0].when", "error"),
    bad("iter-outside-a-loop", pb("""
        - step: a
          tool: {kind: python, input: {p: "{{ iter.page }}"}, code: "result = 1"}  # <--
        """), "`iter.page`: this step has no `loop`", "a", "tool.input.p", "warning"),
    # --- workload keys, variables, step results -----------------------------------------------
    bad("unknown-name", pb("""
        - step: a
          tool: {kind: python, input: {n: "{{ limt }}"}, code: "result = 1"}  # <--
        """, TOP), "`limt` is not defined in this playbook", "a", "tool.input.n", "warning"),
    bad("unknown-name-guess", pb("""
        - step: a
          tool: {kind: python, input: {n: "{{ limt }}"}, code: "result = 1"}  # <--
        """, TOP), "did you mean `limit`?", "a", "tool.input.n", "warning"),
    bad("engine-name-typo", pb("""
        - step: a
          tool: {kind: noop}
          set: {total: "{{ outptu.data }}"}  # <--
        """), "did you mean `output`?", "a", "set.total", "warning"),
    bad("noetl-v1-outcome-name", pb("""
        - step: a
          tool: {kind: noop}
          next: {arcs: [{step: a, when: "{{ response.status_code == 200 }}"}]}  # <--
        """), "a step's outcome is `output` in `set` and arcs (`output.data`)", "a",
        "next.arcs[0].when", "warning"),
    bad("unknown-name-in-step-when", pb("""
        - step: a
          when: "{{ limt > 1 }}"  # <--
          tool: {kind: noop}
        """, TOP), "`limt` is not defined in this playbook", "a", "when", "warning"),
    bad("unknown-step-in-step-when", pb("""
        - step: start
          tool: {kind: noop}
          next: {arcs: [{step: a}]}
        - step: a
          when: "{{ strat.go }}"  # <--
          tool: {kind: noop}
        """), "did you mean `start`?", "a", "when", "warning"),
    bad("unknown-ctx-key-in-step-when", pb("""
        - step: a
          when: "{{ ctx.limmit > 1 }}"  # <--
          tool: {kind: noop}
        """, TOP), "did you mean `ctx.limit`?", "a", "when", "warning"),
    bad("unknown-ctx-key", pb("""
        - step: a
          tool: {kind: noop}
          set: {total: "{{ ctx.limmit + 1 }}"}  # <--
        """, TOP), "`ctx.limmit`: no workload key, step or `set` key is called `limmit`; "
        "unless the execution payload supplies it, rendering fails; did you mean `ctx.limit`?",
        "a", "set.total", "warning"),
    bad("unknown-workload-key", pb("""
        - step: a
          tool: {kind: noop}
          next: {arcs: [{step: a, when: "{{ workload.citys }}"}]}  # <--
        """, TOP), "did you mean `workload.cities`?", "a", "next.arcs[0].when", "warning"),
    bad("step-result-typo", pb("""
        - step: fetch
          tool: {kind: noop}
          next: {arcs: [{step: use}]}
        - step: use
          tool: {kind: python, input: {r: "{{ fetc.rows }}"}, code: "result = 1"}  # <--
        """), "did you mean `fetch`?", "use", "tool.input.r", "warning"),
    bad("line-inside-a-block", pb("""
        - step: q
          tool:
            kind: duckdb
            query: |
              SELECT 1
              FROM {{ tabel }}  -- # <--
        """, "workload: {table: t}\n"), "did you mean `table`?", "q", "tool.query", "warning"),
    bad("noetl-token-function", pb("""
        - step: a
          tool: {kind: http, url: "http://x", headers: {A: "{{ token('g') }}"}}  # <--
        """), "this playbook declares no `keychain`", "a", "tool.headers.A", "warning"),
    # --- event names ---------------------------------------------------------------------------
    bad("event-unknown", pb("""
        - step: a
          tool: {kind: noop}
          next: {arcs: [{step: a, when: "{{ event.name == 'call.don' }}"}]}  # <--
        """), "`event.name` is compared with `call.don`, which no event is called; arcs here "
        "see `call.done`, `call.error`; did you mean `call.done`?", "a", "next.arcs[0].when",
        "error"),
    bad("event-unknown-in-list", pb("""
        - step: a
          tool: {kind: noop}
          next: {arcs: [{step: a, when: "{{ event.name in ['call.error', 'failed'] }}"}]}  # <--
        """), "compared with `failed`, which no event is called", "a", "next.arcs[0].when",
        "error"),
    bad("event-never-routed", pb("""
        - step: a
          tool: {kind: noop}
          next: {arcs: [{step: a, when: "{{ event.name == 'step.exit' }}"}]}  # <--
        """), "`step.exit`, an event arcs never see", "a", "next.arcs[0].when", "warning"),
    bad("event-call-done-on-loop", pb("""
        - step: each
          loop: {in: [1], iterator: n}
          tool: {kind: noop}
          next: {arcs: [{step: each, when: "{{ 'call.done' == event.name }}"}]}  # <--
        """), "the arcs of a loop step are evaluated on `loop.done` only", "each",
        "next.arcs[0].when", "warning"),
    bad("event-loop-done-without-loop", pb("""
        - step: a
          tool: {kind: noop}
          next: {arcs: [{step: a, when: "{{ event.name == 'loop.done' }}"}]}  # <--
        """), "this step has no `loop`: its arcs see `call.done` and `call.error`", "a",
        "next.arcs[0].when", "warning"),
    # --- credential aliases --------------------------------------------------------------------
    bad("credential-missing", pb(PG % "auth: pg_locl  # <--"),
        "credential `pg_locl` is not in credentials file c.yaml; did you mean `pg_local`?",
        "q", "tool.auth", "error", FILE_CREDS),
    bad("credential-missing-no-guess", pb(PG % "auth: warehouse  # <--"),
        "it defines: `pg_local`, `pg_test`", "q", "tool.auth", "error", FILE_CREDS),
    bad("credential-mapping", pb(PG % "auth: {key: pg_lokal}  # <--"),
        "did you mean `pg_local`?", "q", "tool.auth.key", "error", FILE_CREDS),
    bad("credential-no-file", pb(PG % "auth: pg_local  # <--"),
        "credential `pg_local` is not checked: NOETL_CREDENTIALS_FILE is not set", "q",
        "tool.auth", "warning", NO_FILE),
    bad("credential-cursor", pb("""
        - step: drain
          loop:
            cursor: {auth: pg_tst, claim: "SELECT 1"}  # <--
            iterator: row
            spec: {mode: cursor}
          tool: {kind: noop}
        """), "did you mean `pg_test`?", "drain", "loop.cursor.auth", "error", FILE_CREDS),
    bad("credential-pipeline-task", pb("""
        - step: p
          tool:
            - {name: one, kind: postgres, auth: nope, command: "select 1"}  # <--
        """), "credential `nope` is not in", "p", "tool[0].auth", "error", FILE_CREDS),
    bad("credential-workbook", pb("- step: a\n  tool: {kind: noop}\n", """
        workbook:
          - name: w
            tool: {kind: postgres, auth: nope, command: "select 1"}  # <--
        """), "credential `nope` is not in", None, "workbook[0].tool.auth", "error",
        FILE_CREDS),
    # --- a loop step's result fields (its shape is the engine's) -----------------------------
    bad("loop-result-field", pb(FAN + """
        - step: b
          tool: {kind: python, input: {n: "{{ fan.count }}"}, code: "result = 1"}  # <--
        """), "`fan.count`: `fan` is a loop step, and its result has `stats` and `results` "
        "only", "b", "tool.input.n", "error"),
    bad("loop-stats-field", pb(FAN + """
        - step: b
          tool: {kind: python, input: {n: "{{ fan.data.stats.totl }}"}, code: "result = 1"}  # <--
        """), "a loop step's `stats` has `failed`, `quarantined`, `success`, `total`; did you mean "
        "`fan.stats.total`?", "b", "tool.input.n", "error"),
]

GOOD = [
    good("iterator-and-index", pb(LOOP % "{{ iter.city }} {{ iter._index }} {{ city.name }}"
                                  " {{ loop_index }} {{ iter._first }} {{ iter._last }}", TOP)),
    good("iter-key-written-by-set", pb("""
        - step: each
          loop: {in: [1], iterator: n}
          tool:
            - name: t
              kind: noop
              spec: {policy: {rules: [{else: {then: {do: continue, set: {iter.page: 1}}}}]}}
            - {name: u, kind: python, input: {p: "{{ iter.page }}"}, code: "result = 1"}
        """)),
    good("iter-in-pipeline-of-plain-step", pb("""
        - step: p
          tool:
            - {name: a, kind: noop, spec: {policy: {rules: [{when: true,
               then: {do: continue, set: {iter.page: 1}}}]}}}
            - {name: b, kind: python, input: {x: "{{ iter.page }} {{ a }} {{ _prev }}"},
               code: "result = 1"}
        """)),
    good("guarded-names", pb("""
        - step: a
          tool: {kind: python, input: {x: "{{ maybe | default(1) }}",
                 y: "{% if other is defined %}{{ other.k }}{% endif %}",
                 z: "{{ iter.nothing | d(0) }}"}, code: "result = 1"}
        """)),
    good("template-locals", pb("""
        - step: a
          tool: {kind: python, input: {x: "{% set n = 1 %}{% for c in cities %}{{ c }}{{ n }}
                 {{ loop.index }}{% endfor %}{{ range(3) | list }} {{ now() }}"},
                 code: "result = 1"}
        """, TOP)),
    good("defined-names", pb("""
        - step: a
          input: {from_input: 1}
          tool: {kind: python, input: {x: "{{ limit }} {{ workload.cities }} {{ ctx.total }}
                 {{ seen }} {{ from_input }} {{ execution_id }} {{ job.uuid }}"},
                 code: "result = {'v': x}"}
          set: {total: 1, ctx.other: "{{ a.v }}", step.s2: "{{ output.data }}"}
          next: {arcs: [{step: b, set: {seen: 1}, when: "{{ a.v and ctx.other and s2 }}"}]}
        - step: b
          loop: {in: "{{ cities }}", iterator: city}
          tool: {kind: noop}
          next: {arcs: [{step: c, when: "{{ event.name == 'loop.done' }}"}]}
        - step: c
          tool: {kind: python, input: {last: "{{ city }} {{ b.stats.total }}"},
                 code: "result = 1"}
          next: {arcs: [{step: a, when: "{{ event.name in ['call.done', 'call.error'] }}"}]}
        """, TOP)),
    good("methods-are-not-keys", pb("""
        - step: a
          tool: {kind: python, input: {x: "{{ ctx.get('anything') }} {{ iter.get('k') }}"},
                 code: "result = 1"}
        """)),
    good("python-code-and-tool-output-are-not-templates", pb("""
        - step: a
          tool:
            kind: python
            code: "x = {{1}}; result = '{{ nothing }}'"
            output: {path: "{{ nowhere }}"}
        """)),
    good("keychain-names", pb("""
        - step: a
          tool: {kind: http, url: "{{ keychain.api.token }} {{ api }}"}
        """, "keychain:\n  - {name: api, kind: static, map: {token: t}}\n")),
    good("token-reads-the-keychain", pb("""
        - step: a
          tool: {kind: http, url: "http://x", headers: {A: "Bearer {{ token('api') }}"}}
        """, "keychain:\n  - {name: api, kind: static, map: {access_token: t}}\n")),
    good("credential-known", pb(PG % "auth: pg_local"), FILE_CREDS),
    good("credential-template-not-checked", pb(PG % "auth: '{{ limit }}'", TOP), FILE_CREDS),
    good("credential-duckdb-not-checked", pb("""
        - step: q
          tool: {kind: duckdb, auth: anything, query: "select 1"}
        """), FILE_CREDS),
    good("credential-not-asked", pb(PG % "auth: whatever")),
    good("step-when-reads-steps-variables-and-the-arc", pb("""
        - step: start
          tool: {kind: noop}
          next: {arcs: [{step: a}]}
        - step: a
          loop: {in: [1, 2], iterator: n}
          when: "{{ start.go and limit > 1 and event.name == 'call.done' and output.data }}"
          tool: {kind: noop}
        """, TOP)),
    good("loop-result-fields", pb(FAN + """
        - step: b
          tool:
            kind: python
            input:
              a: "{{ fan.stats.total }} {{ fan.results | length }} {{ fan.data.stats.failed }}"
              b: "{{ fan._ref }} {{ fan.get('x') }} {{ fan.nope | default(0) }}"
            code: "result = 1"
        """)),
    good("a-variable-named-like-a-loop-step-is-not-checked", pb(FAN + """
        - step: b
          tool: {kind: python, input: {n: "{{ fan.anything }}"}, code: "result = 1"}
        """, "workload:\n  fan: {anything: 1}\n")),
]
# fmt: on


@pytest.mark.parametrize(("text", "fragment", "step", "field", "severity", "creds"), BAD)
def test_one_bad_name_one_problem(
    text: str,
    fragment: str,
    step: str | None,
    field: str,
    severity: str,
    creds: CredentialAliases | None,
) -> None:
    problems = validate_text(text, file="pb.yaml", credentials=creds).problems
    assert len(problems) == 1, "\n".join(str(p) for p in problems)
    problem = problems[0]
    assert fragment in problem.message, problem.message
    assert (problem.file, problem.line, problem.step, problem.field, problem.severity) == (
        "pb.yaml",
        marked_line(text),
        step,
        field,
        severity,
    )


@pytest.mark.parametrize(("text", "creds"), GOOD)
def test_good_names_have_no_problem(text: str, creds: CredentialAliases | None) -> None:
    problems: list[Problem] = validate_text(text, credentials=creds).problems
    problems = [p for p in problems if p.field != "keychain"]  # its own warning
    assert problems == [], "\n".join(str(p) for p in problems)


def test_an_error_rejects_the_playbook_a_warning_does_not() -> None:
    assert not validate_text(pb(LOOP % "{{ iter.cty }}", TOP)).ok
    assert validate_text(pb(LOOP % "{{ from_payload }}", TOP)).ok


def test_a_credential_without_file_is_reported_once() -> None:
    text = pb(PG % "auth: pg_a" + PG.replace("step: q", "step: r") % "auth: pg_a")
    problems = validate_text(text, credentials=NO_FILE).problems
    assert [p.step for p in problems] == ["q"]


@pytest.mark.parametrize(
    ("template", "names"),
    [
        ("{{ a.b['c'].d }}", [("a", "b", "c", "d")]),
        ("{{ rows[i].x }}", [("rows",), ("i",)]),
        ("{{ f(x.y) }}", [("f",), ("x", "y")]),
        ("{{ x.y.upper() }}", [("x", "y")]),
        ("{% for r in rs %}{{ r.k }}{% endfor %}", [("rs",)]),
        ("{% macro m(v) %}{{ v }}{% endmacro %}{{ m(w) }}", [("w",)]),
        ("{{ a | default(1) }}{{ a.b }}", []),
        ("{% if a.b is defined %}{{ a.b.c }}{% endif %}{{ a.z }}", [("a", "z")]),
        ("{{ 'x' ~ range(2) | join }}", []),
    ],
)
def test_template_references(template: str, names: list[tuple[str, ...]]) -> None:
    refs = template_refs(template)
    assert refs is not None
    assert [r.names for r in refs.references] == names


def test_event_comparisons_and_bad_syntax() -> None:
    refs = template_refs("{{ event.name == 'a' or 'b' != event.name or event.name in ('c', x) }}")
    assert refs is not None and [e.value for e in refs.events] == ["a", "b", "c"]
    assert template_refs("{{ unclosed") is None
