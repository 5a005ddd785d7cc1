"""Legacy spellings NoETL still accepts, rewritten to the current form in one place.

`normalise_legacy` runs on the raw YAML data before the models and checks see it (both
`validate` and the runtime load playbooks through `validation.validate_text`), so a legacy
form validates and runs exactly like its current spelling; each rewrite is reported as a
deprecation warning. Pure: no I/O, the data is changed in place.

NoETL code followed:
- `credential:` on a tool means `auth:` (noetl/tools/postgres/auth.py "'credential' is
  deprecated; use 'auth' instead", likewise noetl/tools/snowflake/auth.py,
  noetl/tools/gcs/executor.py); `auth` wins when both are given.
- `credentials:` on a tool means `auth:` (noetl/worker/auth_compatibility.py), except on
  duckdb, where `credentials` is the tool's own list of secrets (noetl/tools/duckdb).
- a `kind: playbook` tool names its playbook by `path`, or the older `resource_path` /
  `playbook_path` (noetl/core/workflow/playbook/loader.py `get_playbook_path`).
- policy rules (`spec.policy.rules`) are plain mappings to NoETL (models/policy.py
  `TaskPolicy.rules: list[dict]`), judged only when evaluated
  (noetl/worker/task_sequence_executor.py `_evaluate_policy_rules`): an `else` without
  `then` is skipped, an `else` rule's own `when`/`then` are never read, a rule with
  neither `when` nor `then` is skipped, and a matching `when` without `then` fails the
  task. Those shapes are accepted here with a warning and behave the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from noetl_celery.models.yaml_positions import Path

_PLAYBOOK_PATH_ALIASES = ("resource_path", "playbook_path")


@dataclass(frozen=True)
class LegacyNote:
    """One rewrite: where the legacy key was written, and the warning to show."""

    path: Path
    message: str


def normalise_legacy(data: Any) -> list[LegacyNote]:
    """Rewrite every legacy form in a playbook's raw data; the notes say what changed."""
    notes: list[LegacyNote] = []
    if not isinstance(data, dict):
        return notes
    for path, tool in _tools(data):
        notes.extend(_normalise_tool(path, tool))
    return notes


def _tools(data: Mapping[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every tool mapping: step tools, pipeline tasks and workbook tools."""
    for section in ("workflow", "workbook"):
        items = data.get(section)
        if not isinstance(items, list):
            continue
        for index, item in enumerate(items):
            tool = item.get("tool") if isinstance(item, dict) else None
            if isinstance(tool, dict):
                yield (section, index, "tool"), tool
            elif isinstance(tool, list):
                for position, task in enumerate(tool):
                    if isinstance(task, dict):
                        yield (section, index, "tool", position), task


def _normalise_tool(path: Path, tool: dict[str, Any]) -> list[LegacyNote]:
    notes: list[LegacyNote] = []
    aliases = ["credential"] if tool.get("kind") == "duckdb" else ["credential", "credentials"]
    for key in aliases:
        if key in tool:
            notes.append(_rename(path, tool, key, "auth"))
    if tool.get("kind") == "playbook":
        for key in _PLAYBOOK_PATH_ALIASES:
            if key in tool:
                notes.append(_rename(path, tool, key, "path"))
    spec = tool.get("spec")
    policy = spec.get("policy") if isinstance(spec, dict) else None
    rules = policy.get("rules") if isinstance(policy, dict) else None
    if isinstance(rules, list):
        for index, rule in enumerate(rules):
            if isinstance(rule, dict):
                notes.extend(_normalise_rule((*path, "spec", "policy", "rules", index), rule))
    return notes


def _normalise_rule(path: Path, rule: dict[str, Any]) -> list[LegacyNote]:
    if "else" in rule:
        notes = []
        for key in ("when", "then"):
            if key in rule:
                del rule[key]
                notes.append(
                    LegacyNote(
                        (*path, key),
                        f"an `else` rule's own `{key}` is never used (NoETL ignores it "
                        "too); move it into a rule of its own",
                    )
                )
        clause = rule["else"]
        if not (isinstance(clause, dict) and "then" in clause):
            rule["else"] = {}
            notes.append(
                LegacyNote(
                    (*path, "else"),
                    "`else` without `then` does nothing: NoETL skips this rule, and so "
                    "does noetl-celery; write `else: {then: {do: ...}}`",
                )
            )
        return notes
    if "then" in rule:
        return []
    if "when" in rule:
        message = (
            "a rule with `when` and no `then` fails the task when it matches (as in "
            "NoETL); add `then: {do: ...}`"
        )
    else:
        message = "a rule with neither `when`, `then` nor `else` does nothing and is skipped"
    return [LegacyNote(path, message)]


def _rename(path: Path, tool: dict[str, Any], old: str, new: str) -> LegacyNote:
    value = tool.pop(old)
    if new in tool:
        return LegacyNote(
            (*path, old),
            f"`{old}:` is NoETL's legacy spelling of `{new}:`, and `{new}:` is given too; "
            f"`{old}:` is ignored (as NoETL does): remove it",
        )
    tool[new] = value
    return LegacyNote(
        (*path, old),
        f"`{old}:` is NoETL's legacy spelling of `{new}:` (deprecated); it is read as "
        f"`{new}:`, rename it",
    )
