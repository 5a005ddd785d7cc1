"""The embedded `run` of hello_world imports only what it uses (issue 15: a cold start
in a blink). Not a timing test: it names the packages that must stay unimported, so a
module-level import that drags one back in fails here whatever the machine's speed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.fresh_python import ROOT, python_c

HELLO = ROOT / "playbooks" / "examples" / "hello_world.yaml"

# what hello_world never needs: the broker side, Flower and the web server, migrations
# (an existing and a new SQLite file are both read and made without alembic), the other
# tools' drivers, the Postgres dialect, rich (no terminal), croniter (no schedule)
UNUSED = [
    "celery",
    "kombu",
    "flower",
    "tornado",
    "fastapi",
    "uvicorn",
    "alembic",
    "duckdb",
    "httpx",
    "psycopg",
    "sqlalchemy.dialects.postgresql",
    "sqlalchemy.orm",
    "rich",
    "croniter",
    "noetl_celery.tasks.app",
    "noetl_celery.web.app",
    "noetl_celery.passes.pass_recorder",
]

# runs `noetl-celery run hello_world --json` twice in one process (a new NOETL_HOME, then
# the existing one) through the console script's entry point, then lists what was loaded
SCRIPT = """
import json, sys
from noetl_celery.cli.main import main
playbook, unused = sys.argv[1], json.loads(sys.argv[2])
codes = []
for _ in range(2):
    sys.argv = ["noetl-celery", "run", playbook, "--json"]
    try:
        main()
    except SystemExit as exc:
        codes.append(exc.code)
print(json.dumps({"codes": codes, "loaded": [m for m in unused if m in sys.modules]}))
"""


def test_an_embedded_run_of_hello_world_imports_only_what_it_uses(tmp_path: Path) -> None:
    done = python_c(SCRIPT, [str(HELLO), json.dumps(UNUSED)], tmp_path)
    *runs, last = done.stdout.strip().splitlines()
    assert len(runs) == 2 and all(json.loads(r)["status"] == "COMPLETED" for r in runs), runs
    report = json.loads(last)
    assert report["codes"] == [0, 0]
    assert report["loaded"] == [], f"imported by an embedded hello_world run: {report['loaded']}"


def test_every_command_in_the_lazy_table_loads_under_its_name() -> None:
    """cli.main imports commands by name: a wrong module or attribute in its table would
    only show when someone ran that command."""
    import click

    from noetl_celery.cli.main import COMMANDS, cli

    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name, name
    assert cli.get_command(ctx, "no-such-command") is None


# imports `validate`'s module through the console script's entry point, noting whether
# the collector ran while it was imported, then reports the collector's state after
GC_SCRIPT = """
import gc, json, sys
from noetl_celery.cli.main import main
seen = []
class Watch:  # a finder that finds nothing: it only looks when the module is searched for
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "noetl_celery.cli.catalog":
            seen.append(gc.isenabled())
        return None
sys.meta_path.insert(0, Watch)
sys.argv = ["noetl-celery", "validate", "--help"]
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "during": seen, "after": gc.isenabled(),
                  "frozen": gc.get_freeze_count()}))
"""


def test_the_collector_is_off_while_a_command_is_imported_and_on_after(tmp_path: Path) -> None:
    """The start-up's objects all live on: collecting while they are made is wasted
    (cli.main.main); a command that runs for hours must still have its collector."""
    done = python_c(GC_SCRIPT, [], tmp_path)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] == 0
    assert report["during"] == [False]
    assert report["after"] is True
    assert report["frozen"] > 0


# counts how often the playbook's YAML is parsed during `run` (new home, then existing)
PARSES = """
import json, sys
import noetl_celery.models.validation as validation
from noetl_celery.cli.main import main
real, parses = validation.parse_yaml, []
def counting(text):
    parses.append(len(text))
    return real(text)
validation.parse_yaml = counting
playbook, counts = sys.argv[1], []
for _ in range(2):
    before = len(parses)
    sys.argv = ["noetl-celery", "run", playbook, "--json"]
    try:
        main()
    except SystemExit as exc:
        assert exc.code == 0, exc.code
    counts.append(len(parses) - before)
print(json.dumps(counts))
"""


def test_an_embedded_run_parses_its_playbook_once(tmp_path: Path) -> None:
    """`run` validates the file to print its warnings; registering it and the
    execution's passes and tasks use that parse instead of reading the text again (it
    was parsed three times: a third of the work after the imports)."""
    done = python_c(PARSES, [str(HELLO)], tmp_path)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [1, 1]
