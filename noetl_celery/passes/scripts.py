"""Reading `script:` files when a playbook is registered (the client has the files).

A relative `uri` is looked up beside the playbook file first, then in the current
directory (NoETL resolves it against the working directory only: its fixtures write
`./tests/fixtures/...` from the repository's root). The text is stored with the catalog
version, so workers on other machines need no file and a run by catalog path from any
directory finds it. A `uri` that renders from the workload alone (`"{{ script_path }}"`)
is captured too; one that needs run-time values is read by the worker, beside the
playbook's original location, when that worker has it.

A missing file is a validation problem naming the file and the step. http(s) sources are
fetched by the worker at run time, as NoETL does (tools.script_fetch); gcs and s3 fail
there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from noetl_celery.constants import MAX_PLAYBOOK_BYTES
from noetl_celery.errors import InputInvalid, NoetlError, PlaybookInvalid, Problem
from noetl_celery.models.playbook import Playbook
from noetl_celery.models.script_source import (
    SCRIPT_KINDS,
    UNSUPPORTED_TYPES,
    ScriptConfigError,
    StoredScripts,
    has_template,
    parse_script,
    unsupported_message,
)
from noetl_celery.models.text_files import read_text_file
from noetl_celery.models.yaml_positions import YamlDocument, parse_yaml
from noetl_celery.templating import STRICT
from noetl_celery.tools.script_fetch import ScriptFetchError, fetch_script
from noetl_celery.tools.services import ToolServices

# A script is code, like a playbook: the same size limit keeps catalog rows sane.
MAX_SCRIPT_BYTES = MAX_PLAYBOOK_BYTES


def base_dir_of(file: str | None) -> Path | None:
    """The directory of the playbook file `file` names, when it is a real file."""
    if not file:
        return None
    path = Path(file)
    return path.resolve().parent if path.is_file() else None


def candidates(uri: str, base_dir: str | Path | None) -> list[Path]:
    """Where a file `uri` may be: itself when absolute, else beside the playbook, then
    in the current directory."""
    path = Path(uri).expanduser()
    if path.is_absolute():
        return [path]
    found = [Path(base_dir) / path] if base_dir else []
    cwd = Path.cwd() / path
    if cwd not in found:
        found.append(cwd)
    return found


def read_script_file(uri: str, base_dir: str | Path | None) -> str | None:
    """The file's text, None when it is in none of the candidate places; InputInvalid
    (naming the file) when it is there but unreadable, too large or not UTF-8."""
    for path in candidates(uri, base_dir):
        if path.is_file():
            return read_text_file(path, max_bytes=MAX_SCRIPT_BYTES, what="script")
    return None


def _workload_uri(raw_uri: Any, playbook: Playbook) -> str | None:
    """The uri rendered against the workload; None when it needs run-time values."""
    if not isinstance(raw_uri, str):
        return None
    if not has_template(raw_uri):
        return raw_uri.strip()
    workload = dict(playbook.workload)
    context = {**workload, "workload": workload, "ctx": workload}
    try:
        rendered = STRICT.value(raw_uri, context, "script.uri")
    except NoetlError:
        return None
    return rendered.strip() if isinstance(rendered, str) and not has_template(rendered) else None


def _inline(raw: Any) -> bool:
    source = raw.get("source") if isinstance(raw, dict) else None
    return isinstance(source, dict) and source.get("type") == "inline"


def capture_scripts(
    playbook: Playbook, file: str | None, text: str | None = None
) -> StoredScripts | None:
    """The file scripts of `playbook` read now; None when it has none. Raises
    `PlaybookInvalid` naming each missing or unreadable file, its step, and its line
    when the playbook's `text` is given."""
    base = base_dir_of(file)
    files: dict[str, str] = {}
    problems: list[Problem] = []
    any_file = False
    document: YamlDocument | None = None

    def problem(step: str, where: tuple[str | int, ...], message: str) -> Problem:
        nonlocal document
        if document is None and text is not None:
            document = parse_yaml(text)  # only on a problem: it parses the text again
        line = document.line_of((*where, "script", "uri")) if document is not None else None
        return Problem(message, file=file, line=line, step=step, field="tool.script.uri")

    for step, where, tool in playbook.tools():
        raw = (tool.model_extra or {}).get("script")
        if tool.kind not in SCRIPT_KINDS or raw is None or _inline(raw):
            continue  # no script, or its code is in the playbook
        raw_uri = raw.get("uri") if isinstance(raw, dict) else raw
        uri = _workload_uri(raw_uri, playbook)
        if uri is None:
            any_file = True  # may be a file: keep the base directory for the worker
            continue
        rendered = {**raw, "uri": uri} if isinstance(raw, dict) else uri
        try:
            source = parse_script(rendered)
        except ScriptConfigError:
            continue  # a rendered value validation could not see: the worker reports it
        if source.type != "file":
            continue
        any_file = True
        if uri in files:
            continue
        try:
            content = read_script_file(uri, base)
        except InputInvalid as exc:
            problems.append(problem(step, where, f"script file '{uri}': {exc.reason}"))
            continue
        if content is None:
            looked = ", ".join(str(p.parent) for p in candidates(uri, base))
            problems.append(
                problem(step, where, f"script file '{uri}' not found (looked in {looked})")
            )
            continue
        files[uri] = content
    if problems:
        raise PlaybookInvalid(problems)
    if not any_file:
        return None
    return StoredScripts(base_dir=str(base) if base else os.getcwd(), files=files)


# ---- on the worker, when the step runs ------------------------------------------------------
SQL_FIELDS = (
    "command_b64",
    "commands_b64",
    "query_b64",
    "query",
    "queries",
    "command",
    "commands",
    "cmd",
    "cmds",
)
PYTHON_FIELDS = ("code", "code_b64", "code_base64")


def script_text(raw: Any, stored: StoredScripts, services: ToolServices, where: str) -> str:
    """The text a rendered `script` mapping names; ScriptFetchError (the step's failure,
    naming the step) when it cannot be had."""
    try:
        source = parse_script(raw)
    except ScriptConfigError as exc:
        raise ScriptFetchError("config_error", f"{where}: {exc}") from None
    if source.type in UNSUPPORTED_TYPES:
        raise ScriptFetchError("config_error", unsupported_message(source.type, where))
    if source.type == "inline":
        return source.code or ""
    if source.type == "http":
        return fetch_script(source, services, where)
    text = stored.files.get(source.uri)
    if text is not None:
        return text
    try:
        text = read_script_file(source.uri, stored.base_dir)
    except InputInvalid as exc:
        raise ScriptFetchError("config_error", f"{where}: script file {exc}") from None
    if text is None:
        raise ScriptFetchError(
            "config_error",
            f"{where}: script file '{source.uri}' was not stored when the playbook was "
            "registered (its uri needs run-time values) and is not on this worker; give a "
            "path that renders from the workload, or an http(s) URL",
        )
    return text


def apply_script(
    kind: str, config: Mapping[str, Any], text: str, render: Callable[[str], Any]
) -> dict[str, Any]:
    """The tool config with the script as its code (python, not rendered, as inline
    `code`) or its SQL (rendered, as inline `command` is); `script` wins over inline."""
    if kind == "python":
        kept = {k: v for k, v in config.items() if k not in PYTHON_FIELDS and k != "script"}
        return {**kept, "code": text}
    kept = {k: v for k, v in config.items() if k not in SQL_FIELDS and k != "script"}
    return {**kept, "command": render(text)}
