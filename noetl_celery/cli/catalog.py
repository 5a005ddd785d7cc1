"""`validate` and `catalog register`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TypedDict

import click

from noetl_celery.cli.common import EXIT_INVALID, build_engine, dump_json, load_settings
from noetl_celery.cli.renderables import catalog_renderable, stdout_console
from noetl_celery.cli.targets import TargetError, split_ref
from noetl_celery.engine.bootstrap import Role
from noetl_celery.errors import CatalogNotFound, PlaybookInvalid, Problem
from noetl_celery.models.playbook import Playbook
from noetl_celery.models.validation import CredentialAliases, ValidationReport, validate_file
from noetl_celery.models.yaml_positions import YamlSyntaxError, parse_yaml
from noetl_celery.passes.scripts import capture_scripts
from noetl_celery.tools.credentials import CredentialStore


def check_file(path: Path, credentials: CredentialAliases | None = None) -> ValidationReport:
    """`validate_file`, plus the `script:` files it names: a missing one is an error here,
    as it is when the playbook is registered (passes.scripts)."""
    report = validate_file(path, credentials=credentials)
    if report.playbook is not None:
        try:
            capture_scripts(report.playbook, str(path), path.read_text(encoding="utf-8"))
        except PlaybookInvalid as exc:
            report.problems.extend(exc.problems)
            report.playbook = None
    return report


def playbook_files(target: Path) -> list[Path]:
    if target.is_dir():
        return sorted(p for p in target.rglob("*") if p.suffix in (".yaml", ".yml"))
    return [target]


class ProblemJSON(TypedDict):
    """One problem as `validate --json` and `register --json` list it."""

    file: str
    line: int | None
    step: str | None
    field: str | None
    message: str
    severity: str


def problem_json(file: Path, problem: Problem) -> ProblemJSON:
    return {
        "file": problem.file or str(file),
        "line": problem.line,
        "step": problem.step,
        "field": problem.field,
        "message": problem.message,
        "severity": problem.severity,
    }


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON array of problems (warnings included)."
)
def validate(files: tuple[Path, ...], as_json: bool) -> None:
    """Check playbooks without running them; every problem is listed with its location.
    Exit 2 if any has an error. `auth:` aliases are checked against NOETL_CREDENTIALS_FILE."""
    credentials = credential_aliases()
    reports = {f: check_file(f, credentials) for target in files for f in playbook_files(target)}
    if as_json:
        dump_json([problem_json(f, p) for f, r in reports.items() for p in r.problems])
    else:
        for path, report in reports.items():
            for problem in report.problems:
                click.echo(str(problem), err=not report.ok)
            if report.ok:
                click.echo(f"{path}: ok")
    sys.exit(0 if all(r.ok for r in reports.values()) else EXIT_INVALID)


def credential_aliases() -> CredentialAliases:
    """The aliases of NOETL_CREDENTIALS_FILE (a bad file raises ConfigurationError naming
    it: exit 2); none configured: aliases cannot be checked (a warning per alias)."""
    path = load_settings().credentials_file
    if not path:
        return CredentialAliases(None)
    store = CredentialStore.from_file(path)
    return CredentialAliases(frozenset(store.aliases()), store.source)


@click.group()
def catalog() -> None:
    """The playbook catalog (sub-playbooks resolve by `metadata.path`)."""


@catalog.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of paths.")
def list_(as_json: bool) -> None:
    """Every catalog path with its latest version, how many versions it has, its
    `metadata.name` and when the latest version was registered."""
    engine = build_engine(load_settings(), Role.READER)
    try:
        rows = engine.catalog.listing()
    finally:
        engine.close()
    if as_json:
        dump_json([r.to_json() for r in rows])
    else:
        stdout_console().print(catalog_renderable([r.to_json() for r in rows]))


@catalog.command("show")
@click.argument("ref", metavar="PATH[@VERSION]")
@click.option("--json", "as_json", is_flag=True, help="One object: metadata, versions and content.")
def show(ref: str, as_json: bool) -> None:
    """A registered playbook: its YAML (the latest version unless @VERSION is given),
    preceded by its catalog facts as YAML comments, so the output can be saved and run."""
    try:
        path, version = split_ref(ref)
    except TargetError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_INVALID)
    engine = build_engine(load_settings(), Role.READER)
    try:
        view = engine.catalog.show(path, version)
    except CatalogNotFound as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_INVALID)
    finally:
        engine.close()
    if as_json:
        dump_json(view)
        return
    listed = ", ".join(str(v["version"]) for v in view["versions"])
    click.echo(f"# catalog path: {view['path']}")
    click.echo(f"# version: {view['version']} (latest {view['latest_version']}; versions {listed})")
    click.echo(f"# name: {view['name']}")
    click.echo(f"# registered at: {view['registered_at']}")
    click.echo(f"# catalog id: {view['catalog_id']}, sha256 {view['content_sha256']}")
    stored = (view.get("scripts") or {}).get("files") or {}
    if stored:  # their text is in `--json`
        click.echo(f"# script files stored with this version: {', '.join(sorted(stored))}")
    click.echo(view["content"], nl=not view["content"].endswith("\n"))


@catalog.command("register")
@click.argument("target", type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON array: registered and skipped.")
def register(target: Path, as_json: bool) -> None:
    """Register a playbook file, or every *.yaml below a directory (a declared
    `metadata.schedule` is installed too). Invalid files are skipped, and so are files
    that share a `metadata.path` with another file given (each would replace the other's
    version). Exit 2 if any file was skipped."""
    reports = {path: check_file(path) for path in playbook_files(target)}
    problems = {path: report.errors for path, report in reports.items()}
    problems.update(shared_paths({f: r.playbook for f, r in reports.items() if r.playbook}))
    engine = build_engine(load_settings(), Role.EDITOR)
    out: list[dict[str, Any]] = []
    counts = {"registered": 0, "unchanged": 0, "skipped": 0}
    try:
        for path in reports:
            if problems[path]:
                counts["skipped"] += 1
                out.append(
                    {
                        "file": str(path),
                        "skipped": True,
                        "problems": [problem_json(path, p) for p in problems[path]],
                    }
                )
                if not as_json:
                    click.echo(f"skipped {path}:", err=True)
                    for problem in problems[path]:
                        click.echo(f"  {problem}", err=True)
                continue
            _, entry = engine.register_file(path, install_schedule=True)
            counts["registered" if entry.created else "unchanged"] += 1
            out.append(
                {
                    "file": str(path),
                    "path": entry.path,
                    "version": entry.version,
                    "catalog_id": entry.catalog_id,
                    "created": entry.created,
                }
            )
            if not as_json:
                state = "registered" if entry.created else "unchanged"
                click.echo(f"{state} {entry.path} v{entry.version} ({path})")
    finally:
        engine.close()
    if as_json:
        dump_json(out)
    else:
        summary = ", ".join(f"{n} {what}" for what, n in counts.items())
        click.echo(summary, err=bool(counts["skipped"]))
    sys.exit(EXIT_INVALID if counts["skipped"] else 0)


def shared_paths(playbooks: dict[Path, Playbook]) -> dict[Path, list[Problem]]:
    """A problem for every file whose catalog path another of the files declares too.

    Registered one after the other, the later file would become the path's latest
    version and silently replace the earlier one (and its declared schedule), so which
    playbook runs would depend on file order: neither is registered."""
    by_path: dict[str, list[Path]] = {}
    for file, playbook in playbooks.items():
        by_path.setdefault(playbook.catalog_path, []).append(file)
    out: dict[Path, list[Problem]] = {}
    for catalog_path, group in by_path.items():
        if len(group) < 2:
            continue
        for file in group:
            others = ", ".join(str(f) for f in group if f != file)
            message = (
                f"catalog path '{catalog_path}' is also declared by {others}; give each "
                "playbook its own `metadata.path` (no file declaring it was registered)"
            )
            out[file] = [
                Problem(message, file=str(file), line=_line_of_path(file), field="metadata.path")
            ]
    return out


def _line_of_path(file: Path) -> int | None:
    try:
        document = parse_yaml(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, YamlSyntaxError):
        return None  # it validated a moment ago; a file changing under us has no line
    return None if document is None else document.line_of(("metadata", "path"))
