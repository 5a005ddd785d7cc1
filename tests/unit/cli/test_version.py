"""`noetl-celery --version`: the package's version and where it is installed."""

from __future__ import annotations

import tomllib
from pathlib import Path

from click.testing import CliRunner

import noetl_celery
from noetl_celery.cli.main import cli

ROOT = Path(__file__).resolve().parents[3]


def test_version_names_the_version_and_the_installed_package() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    package = Path(noetl_celery.__file__).resolve().parent
    assert result.output == f"noetl-celery {noetl_celery.__version__} ({package})\n"


def test_the_version_is_written_once() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert project["name"] == "noetl-celery"
