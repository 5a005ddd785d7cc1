"""The YAML examples of the docs (`docs/**/*.md`) and the README, so tests can validate
and run them (docs cannot drift).

A fence with attributes (``` { .yaml title="deploy/kubernetes/worker.yaml" }) shows a
file that is not a playbook (tests.unit.test_deploy_files checks those): it is not an
example here. A line `--8<-- "path"` in a block (pymdownx.snippets, as the docs site
renders it) is the file at that path of the repository. A block is a whole playbook, a
list of steps, a playbook's `metadata:` or a tool's `spec:`; all but the first are
wrapped into a playbook.
A comment line `# {{ step }} -> <json>` in a block states the step's result: the JSON
must be contained in the actual result (dict keys left out are not compared; lists and
other values must be equal).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)
_EXPECT = re.compile(r"^# \{\{ (\w+) \}\} -> (.*)$", re.M)
_SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.M)


@dataclass(frozen=True)
class Example:
    section: str  # the `## ` heading the block is under
    line: int  # where the block starts in its page
    text: str
    expected: dict[str, Any]  # step -> documented result
    page: str = "README.md"  # README.md, or a docs page relative to docs/

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

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
                f"{self.where}: a YAML example must be a playbook, a list of "
                "steps, `metadata:` or `spec:`"
            )
        return yaml.safe_dump(doc, sort_keys=False)


def pages() -> list[Path]:
    """The README and every page of the docs site (not its hooks)."""
    docs = sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)
    return [README, *docs]


def page_name(path: Path) -> str:
    return "README.md" if path == README else path.relative_to(DOCS).as_posix()


def _expand(text: str) -> str:
    """Snippet lines replaced by the files they name (a missing file fails loudly)."""
    return _SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text().rstrip("\n"), text)


def examples(*paths: Path) -> list[Example]:
    """The YAML blocks of `paths` (default: the README and every docs page)."""
    found = []
    for path in paths or tuple(pages()):
        text = path.read_text()
        for match in _BLOCK.finditer(text):
            before = text[: match.start()]
            headings = re.findall(r"^##? (.+)$", before, re.M)
            block = _expand(match.group(1))
            expected = {step: json.loads(raw) for step, raw in _EXPECT.findall(block)}
            found.append(
                Example(
                    section=headings[-1] if headings else "",
                    line=before.count("\n") + 1,
                    text=block,
                    expected=expected,
                    page=page_name(path),
                )
            )
    return found


def contained(documented: Any, actual: Any, where: str = "result") -> list[str]:
    """Where `actual` differs from what the docs say (empty when it matches)."""
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
    return [] if documented == actual else [f"{where}: the docs say {documented!r}, got {actual!r}"]
