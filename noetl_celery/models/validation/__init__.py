"""Validate a playbook before it is registered or run (layer L1: no I/O beyond reading).

`validate_text` reports *every* problem it can find, each located by file, line, step and
field, so a user fixes a playbook in one pass:

1. size and YAML syntax (one problem, nothing else can be checked without a document;
   the loader refuses alias bombs and deep nesting, see `yaml_safe`);
2. the pydantic models (`validation.schema`): shapes, required keys, enums;
3. semantic checks on the raw data (`validation.steps`, `validation.tools`,
   `validation.values`): unknown keys, tool requirements, python syntax, template syntax,
   arc targets, pipelines, loops, `set` keys. They run even when step 2 failed;
4. names templates read that nothing defines, and credential aliases
   (`validation.names`);
5. every string storable in Postgres (no NUL, no lone surrogate) and no NaN.

Warnings (ignored keys, `keychain`, ...) never reject a playbook.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from noetl_celery.constants import MAX_PLAYBOOK_BYTES
from noetl_celery.errors import InputInvalid, PlaybookInvalid, Problem
from noetl_celery.models.inputs import size_words
from noetl_celery.models.legacy import normalise_legacy
from noetl_celery.models.payload_walk import find_problem
from noetl_celery.models.playbook import Playbook
from noetl_celery.models.text_files import read_text_file
from noetl_celery.models.validation.base import ERROR, WARNING, Collector, type_word
from noetl_celery.models.validation.credentials import CredentialAliases
from noetl_celery.models.validation.names import check_names
from noetl_celery.models.validation.schema import validate_model
from noetl_celery.models.validation.steps import check_document
from noetl_celery.models.yaml_positions import YamlSyntaxError, parse_yaml

__all__ = [
    "CredentialAliases",
    "ValidationReport",
    "load_playbook",
    "read_playbook",
    "validate_file",
    "validate_text",
]


@dataclass
class ValidationReport:
    """The outcome of validating one playbook.

    `playbook` is set only when there is no error (warnings allowed), so a caller that
    forgets to check `ok` cannot run a half-valid playbook.
    """

    playbook: Playbook | None
    problems: list[Problem]
    text: str | None = None  # what was validated (None: it could not be read)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == WARNING]

    @property
    def ok(self) -> bool:
        return not self.errors

    def require(self) -> Playbook:
        """The validated playbook; raises `PlaybookInvalid` (with every problem) when the
        text had an error."""
        if self.playbook is None:
            raise PlaybookInvalid(self.problems)
        return self.playbook


def validate_text(
    text: str, file: str | None = None, *, credentials: CredentialAliases | None = None
) -> ValidationReport:
    """Validate playbook YAML text; `file` only labels the problems. `credentials` (what
    the CLI read from NOETL_CREDENTIALS_FILE) checks `auth:` aliases; None skips that."""
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_PLAYBOOK_BYTES:
        message = f"the playbook is larger than the limit of {size_words(MAX_PLAYBOOK_BYTES)}"
        return ValidationReport(None, [Problem(message, file=file)])
    try:
        document = parse_yaml(text)
    except YamlSyntaxError as exc:
        return ValidationReport(None, [Problem(exc.message, file=file, line=exc.line)])
    if document is None or document.data is None:
        message = "the playbook is empty; it needs apiVersion, kind, metadata and workflow"
        return ValidationReport(None, [Problem(message, file=file, line=1)])
    if not isinstance(document.data, dict):
        message = (
            "the playbook must be a YAML mapping with apiVersion, kind, metadata and "
            f"workflow, not {type_word(document.data)}"
        )
        return ValidationReport(None, [Problem(message, file=file, line=document.root_line)])
    collector = Collector(file, document)
    for path in document.duplicate_keys:
        collector.warning(
            path,
            f"`{path[-1]}` is given twice in this mapping; YAML keeps "
            "only the last one, remove the other",
        )
    # legacy spellings NoETL accepts become the current ones before anything checks them,
    # so the validator and the runtime (which loads through here) agree on them
    for note in normalise_legacy(document.data):
        collector.warning(note.path, note.message)
    playbook = validate_model(collector)
    check_document(collector)
    check_names(collector, credentials)
    _check_storable(collector)
    problems = collector.sorted_problems()
    report = ValidationReport(None, problems, text)
    if report.ok:
        report.playbook = playbook
    return report


def _check_storable(collector: Collector) -> None:
    """A string Postgres cannot store (a NUL or a lone surrogate from a YAML escape such
    as "\\0"), or a NaN, would fail the execution's first write at run time."""
    found = find_problem(collector.data)
    if found is not None:
        keys, reason = found
        collector.error(tuple(keys), reason)


def read_playbook(path: str | Path) -> str:
    """A playbook file's text; `InputInvalid` (one line naming the file) when it cannot be
    read, is larger than `MAX_PLAYBOOK_BYTES` or is not UTF-8."""
    return read_text_file(path, max_bytes=MAX_PLAYBOOK_BYTES, what="playbook")


def validate_file(
    path: str | Path, *, credentials: CredentialAliases | None = None
) -> ValidationReport:
    """Validate a playbook file; an unreadable file yields one problem naming it."""
    name = str(path)
    try:
        text = read_playbook(path)
    except InputInvalid as exc:
        return ValidationReport(None, [Problem(exc.reason, file=exc.subject)])
    return validate_text(text, file=name, credentials=credentials)


def load_playbook(text: str, file: str | None = None) -> Playbook:
    """The validated playbook; raises `PlaybookInvalid` (with every problem) on any error."""
    return validate_text(text, file).require()
