"""`validate` and `catalog register`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from noetl_celery.cli.common import EXIT_INVALID, build_engine, dump_json, load_settings
from noetl_celery.models.validation import validate_file


def playbook_files(target: Path) -> list[Path]:
    if target.is_dir():
        return sorted(p for p in target.rglob("*") if p.suffix in (".yaml", ".yml"))
    return [target]


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def validate(files: tuple[Path, ...], as_json: bool) -> None:
    """Check playbooks without running them; every problem is listed with its location."""
    reports = {str(f): validate_file(f) for target in files for f in playbook_files(target)}
    if as_json:
        dump_json(
            {
                name: {
                    "ok": r.ok,
                    "problems": [
                        {
                            "severity": p.severity,
                            "message": p.message,
                            "line": p.line,
                            "step": p.step,
                            "field": p.field,
                        }
                        for p in r.problems
                    ],
                }
                for name, r in reports.items()
            }
        )
    else:
        for name, report in reports.items():
            for problem in report.problems:
                click.echo(str(problem), err=not report.ok)
            if report.ok:
                click.echo(f"{name}: ok")
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
                        "problems": [str(p) for p in report.errors],
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
