"""`validate` and `catalog register`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from noetl_celery.cli.common import EXIT_INVALID, build_engine, dump_json, load_settings
from noetl_celery.errors import Problem
from noetl_celery.models.validation import validate_file


def playbook_files(target: Path) -> list[Path]:
    if target.is_dir():
        return sorted(p for p in target.rglob("*") if p.suffix in (".yaml", ".yml"))
    return [target]


def problem_json(file: Path, problem: Problem) -> dict[str, Any]:
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
    Exit 2 if any has an error."""
    reports = {f: validate_file(f) for target in files for f in playbook_files(target)}
    if as_json:
        dump_json([problem_json(f, p) for f, r in reports.items() for p in r.problems])
    else:
        for path, report in reports.items():
            for problem in report.problems:
                click.echo(str(problem), err=not report.ok)
            if report.ok:
                click.echo(f"{path}: ok")
    sys.exit(0 if all(r.ok for r in reports.values()) else EXIT_INVALID)


@click.group()
def catalog() -> None:
    """The playbook catalog (sub-playbooks resolve by `metadata.path`)."""


@catalog.command("register")
@click.argument("target", type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON array: registered and skipped.")
def register(target: Path, as_json: bool) -> None:
    """Register a playbook file, or every *.yaml below a directory (a declared
    `metadata.schedule` is installed too). Exit 2 if any file was skipped."""
    engine = build_engine(load_settings(), dispatch=False)
    failed = 0
    out: list[dict[str, Any]] = []
    try:
        for path in playbook_files(target):
            report = validate_file(path)
            if not report.ok:
                failed += 1
                out.append(
                    {
                        "file": str(path),
                        "skipped": True,
                        "problems": [problem_json(path, p) for p in report.errors],
                    }
                )
                if not as_json:
                    click.echo(f"skipped {path}:", err=True)
                    for problem in report.errors:
                        click.echo(f"  {problem}", err=True)
                continue
            _, entry = engine.register_file(path, install_schedule=True)
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
    sys.exit(EXIT_INVALID if failed else 0)
