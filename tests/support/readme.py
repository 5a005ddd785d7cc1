"""The README's YAML examples, so tests can validate and run them (docs cannot drift).

A block is a whole playbook, a list of steps, a playbook's `metadata:` or a tool's
`spec:`; all but the first are wrapped into a playbook. A comment line
`# {{ step }} -> <json>` in a block states the step's result: the JSON must be contained
in the actual result (dict keys left out are not compared; lists and other values must
be equal).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)
_EXPECT = re.compile(r"^# \{\{ (\w+) \}\} -> (.*)$", re.M)


@dataclass(frozen=True)
class Example:
    section: str  # the `## ` heading the block is under
    line: int  # where the block starts in the README
    text: str
    expected: dict[str, Any]  # step -> documented result

    def playbook(self, workload: dict[str, Any] | None = None) -> str:
        """The block as a playbook's YAML text."""
        data = yaml.safe_load(self.text)
        if isinstance(data, dict) and "apiVersion" in data:
            if workload:
                data["workload"] = {**workload, **data.get("workload", {})}
            return yaml.safe_dump(data, sort_keys=False)
        doc: dict[str, Any] = {
            "apiVersion": "noetl.io/v2",
            "kind": "Playbook",
            "metadata": {"name": "readme_example"},
        }
        if workload:
            doc["workload"] = workload
        steps = isinstance(data, list) and all(isinstance(s, dict) and "step" in s for s in data)
        if steps and data:
            doc["workflow"] = data
        elif isinstance(data, dict) and set(data) == {"metadata"}:
            doc["metadata"] = data["metadata"]
            doc["workflow"] = [{"step": "start", "tool": {"kind": "noop"}}]
        elif isinstance(data, dict) and set(data) == {"spec"}:  # a tool's policy
            doc["workflow"] = [{"step": "start", "tool": {"kind": "noop", "spec": data["spec"]}}]
        else:
            raise AssertionError(
                f"README line {self.line}: a YAML example must be a playbook, a list of "
                "steps, `metadata:` or `spec:`"
            )
        return yaml.safe_dump(doc, sort_keys=False)


def examples(path: Path = README) -> list[Example]:
    text = path.read_text()
    found = []
    for match in _BLOCK.finditer(text):
        before = text[: match.start()]
        headings = re.findall(r"^## (.+)$", before, re.M)
        expected = {step: json.loads(raw) for step, raw in _EXPECT.findall(match.group(1))}
        found.append(
            Example(
                section=headings[-1] if headings else "",
                line=before.count("\n") + 1,
                text=match.group(1),
                expected=expected,
            )
        )
    return found


def contained(documented: Any, actual: Any, where: str = "result") -> list[str]:
    """Where `actual` differs from what the README says (empty when it matches)."""
    if isinstance(documented, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected a mapping, got {actual!r}"]
        problems = []
        for key, value in documented.items():
            if key not in actual:
                problems.append(f"{where}.{key}: missing")
            else:
                problems.extend(contained(value, actual[key], f"{where}.{key}"))
        return problems
    return [] if documented == actual else [f"{where}: README says {documented!r}, got {actual!r}"]
