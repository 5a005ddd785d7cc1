"""Every exception class in the package, in one tree (checked by tests/unit/test_errors_tree.py).

    NoetlError
    ├── ConfigurationError        bad settings / environment (NOETL_* variables)
    │   └── WorkersElsewhere      the workers on the broker use another engine database
    ├── PlaybookError             the playbook itself is wrong
    │   ├── PlaybookInvalid       rejected by validation (carries every Problem)
    │   ├── CatalogNotFound       a catalog path / version that is not registered
    │   ├── KeychainInvalid       (models.keychain) a keychain entry unusable as written
    │   └── DurationInvalid       (models.durations) a field of seconds that is no duration
    ├── TemplateError             a Jinja template failed to render
    │   ├── UndefinedVariable     the template used a name that does not exist
    │   └── UnsafeCodeValue       a `{{ }}` in python code rendered text that could change it
    ├── ToolError                 a tool could not be set up (not a tool *result* error)
    │   ├── UnknownTool           `kind` names no registered tool
    │   ├── CredentialError       an `auth` alias that cannot be resolved
    │   ├── KeychainError         (tools.keychain) a keychain entry could not be resolved
    │   └── RateLimitKeyError     a `rate_limit.key` rendered empty (or too long) for an item
    ├── InputInvalid              input refused before anything is written: names the input
    │   │                         (a file, `payload.a[3]`, `--set k`) and the limit it broke
    │   ├── PayloadInvalid        a payload too deep or too large, or holding text or values
    │   │                         Postgres cannot store (NUL, lone surrogates, NaN)
    │   └── ShapeError            (web.noetl_inputs) an API request value: answered 422
    ├── StoreError                the engine's own database cannot be used (unreachable,
    │   │                         refused, missing, wrong password, connection lost)
    │   ├── StoreInterrupted      a transaction was cut short (connection lost or ended by
    │   │                         the server, statement timeout, deadlock): rolled back,
    │   │                         safe to do again
    │   ├── StoreUnavailable      the database could not do a statement right now (out of
    │   │                         disk or memory, SQLite locked, the connection pool
    │   │                         exhausted): may work later
    │   └── SchemaOutdated        no engine tables, or another revision than this engine's
    ├── BrokerUnavailable         the broker could not be reached: a start that named its
    │                             execution recorded it, held for the broker (engine.outbox);
    │                             otherwise nothing was created
    ├── ResultNotStorable         a command's outcome holds a value the engine's database
    │                             refuses (Postgres: NUL in text, a lone surrogate)
    ├── RerunError                (passes.rerun) a rerun that cannot be made as asked
    ├── ReplayError               a replayed pass asked history a question its record does
    │                             not hold
    ├── ExecutionNotFound         an execution id that does not exist
    ├── ItemsRedriven             a quarantined item another redrive took first
    ├── PruneBusy                 (engine.retention) another prune holds the prune's lease
    ├── ScheduleNotFound          a schedule id that does not exist
    └── CredentialNotFound        an alias that is not in the credentials file

The CLI prints any of these as one line and exits 2; none is shown with a traceback.

Errors that happen *inside* a step (HTTP 500, SQL error, python exception) are not
raised across the engine: they become the step's `error` object and drive policies and
arcs. Only the errors above cross module boundaries.

The package's other exceptions are deliberately not NoetlErrors: each is control flow
caught close to where it is raised (turned into a step's error, a validation Problem or a
NoetlError there), or must be the type the library it is raised into expects.

    BaseException
    ├── _TimedOut                 (tools.python_tool) the timer's interrupt inside user code:
    │                             the code's own `except Exception` must not swallow it
    └── Exception
        ├── Suspend               (worker.subplaybook) a task waits for a sub-playbook
        ├── Throttled             (worker.throttle) a body waits for its rate_limit turn
        ├── PassCrashed           (worker.closing) the in-place pass crashed after the close
        ├── CommandFailed         (tasks.tasks) shows Celery's observers a failed command
        ├── CursorError           (cursors.base) a claim failed: the step's error
        ├── ScriptFetchError      (tools.script_fetch) a script source could not be fetched
        ├── PoolExhausted         (pgconn) every pooled connection stayed busy
        ├── _ConfigProblem        (tools.python_tool) the python step is misconfigured
        ├── TargetError           (cli.targets) PATH cannot name a playbook
        ├── YamlSyntaxError       (models.yaml_positions) the text is not YAML
        ├── ValueError
        │   ├── ScriptConfigError (models.script_source) a malformed `script` mapping
        │   ├── RequestConfigError (tools.http_request) no request from the http config
        │   └── SqlSourceError    (tools.sql_text) no usable SQL in the tool config
        ├── TimeoutError
        │   └── StillRunning      (cli.follow) the wait ended first: exit 3
        │       └── Detached      (cli.follow) Ctrl-C detached from the execution
        ├── yaml.YAMLError
        │   └── YamlLimitExceeded (models.yaml_safe) raised inside PyYAML's loader
        ├── jinja2.UndefinedError
        │   └── UndefinedNameError (templating.environment) Jinja's undefined-name protocol
        ├── jinja2.SecurityError
        │   └── TemplateTooBig    (templating.environment) past the sandbox's bounds
        ├── click.ClickException
        │   └── InvalidInput      (cli.common) click prints it as one line, exit 2
        └── starlette.exceptions.HTTPException
            └── BodyTooLarge      (web.guard) a request body streamed past the limit: the
                                  app answers 413
"""

from __future__ import annotations

from dataclasses import dataclass


class NoetlError(Exception):
    """Root of every error the engine raises deliberately."""


class ConfigurationError(NoetlError):
    """A setting is missing or malformed."""


class WorkersElsewhere(ConfigurationError):
    """Workers answer on the broker, but none of them uses this engine database: the
    client's commands would never be claimed."""


class PlaybookError(NoetlError):
    """The playbook cannot be used as written."""


@dataclass(frozen=True)
class Problem:
    """One validation finding, located as precisely as the YAML allows."""

    message: str
    file: str | None = None
    line: int | None = None
    step: str | None = None
    field: str | None = None
    severity: str = "error"  # "error" rejects the playbook, "warning" does not

    def __str__(self) -> str:
        where = self.file or "<playbook>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        parts = [where]
        if self.step:
            parts.append(f"step '{self.step}'")
        if self.field:
            parts.append(f"field '{self.field}'")
        prefix = ": ".join(parts)
        tag = "" if self.severity == "error" else f"{self.severity}: "
        return f"{prefix}: {tag}{self.message}"


class PlaybookInvalid(PlaybookError):
    """Validation rejected the playbook; `problems` lists every finding."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        errors = [p for p in problems if p.severity == "error"]
        head = "; ".join(str(p) for p in errors[:5])
        more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
        super().__init__(f"invalid playbook: {head}{more}")


class CatalogNotFound(PlaybookError):
    """No playbook is registered under this catalog path (and version)."""


class TemplateError(NoetlError):
    """A template failed to render; the message names the template."""

    def __init__(self, message: str, template: str | None = None) -> None:
        self.template = template
        super().__init__(message)


class UndefinedVariable(TemplateError):
    """The template referenced a name or attribute that is not defined."""

    def __init__(
        self, message: str, template: str | None = None, *, is_attribute: bool = False
    ) -> None:
        super().__init__(message, template)
        self.is_attribute = is_attribute


class UnsafeCodeValue(TemplateError):
    """A placeholder in python `code:` rendered a value that could change the code around
    it (templating.code_template): the step fails instead of running data as code."""


class ToolError(NoetlError):
    """A tool could not be configured or started."""


class UnknownTool(ToolError):
    """No tool is registered for this `kind`."""


class RateLimitKeyError(ToolError):
    """A `rate_limit.key` rendered to nothing usable for one command (worker.throttle)."""


class CredentialError(ToolError):
    """An `auth` credential alias could not be resolved."""


class InputInvalid(NoetlError):
    """Input that cannot be used as given (a file that is not UTF-8 or too large, a value
    past a documented limit), refused before anything is written. `subject` names the
    input, `reason` says what is wrong; the message is the one line `subject: reason`."""

    def __init__(self, subject: str, reason: str) -> None:
        self.subject = subject
        self.reason = reason
        super().__init__(f"{subject}: {reason}")


class PayloadInvalid(InputInvalid):
    """A payload (`--payload`, `--set`, `payload=`): too deep, too large, or holding
    text or numbers Postgres cannot store; `subject` is the key path (`payload.a.b[3]`)."""


class StoreError(NoetlError):
    """The engine's database is unusable."""


class StoreInterrupted(StoreError):
    """A transaction on the engine's database was cut short and rolled back: its
    connection was lost or ended by the server (`idle_in_transaction_session_timeout`
    after the process stalled), or a statement was cancelled (statement timeout,
    deadlock, serialization failure). Nothing it wrote is kept, and every engine
    transaction is safe to do again (conditional updates, `ON CONFLICT DO NOTHING`)."""


class StoreUnavailable(StoreError):
    """The engine's database could not do a statement for a reason of its own, not of
    the statement's values: out of disk or memory, too many connections, SQLite's
    "database is locked", every pooled connection in use. The driver's error is the
    cause; doing the work again later may succeed (see store.database.transient)."""


class SchemaOutdated(StoreError):
    """The database has no engine tables, or they are at another revision than the one
    this engine needs (`noetl-celery db upgrade` creates / migrates them)."""


class BrokerUnavailable(NoetlError):
    """The broker (NOETL_BROKER_URL, named masked in the message) could not be reached.
    With `execution_id` set, a start got this far: the execution is recorded and its
    first commands are held in the engine database, to be published exactly once when
    the broker is back (engine.outbox; the API answers 202 `accepted`). Without it,
    nothing was created (`run` checks the broker before it starts anything)."""

    def __init__(self, message: str, execution_id: str | None = None) -> None:
        super().__init__(message)
        self.execution_id = execution_id


class ReplayError(NoetlError):
    """A replayed pass asked a question of history its record does not hold
    (orchestrator.recording). Like a StoreError it is never a template's or a step's
    failure: a template that reads history lets it through (templating.render)."""


class ResultNotStorable(NoetlError):
    """The engine's database refused a command's outcome (a `DataError` at its close):
    deterministic, so storing it again would fail again. Not a StoreError: the database
    itself is fine."""


class ExecutionNotFound(NoetlError):
    """There is no execution with this id."""


class ItemsRedriven(NoetlError):
    """A redrive named a quarantined item another redrive took first (each quarantined
    item is redriven at most once: ux_events_item_redriven)."""


class ScheduleNotFound(NoetlError):
    """There is no schedule with this id."""


class CredentialNotFound(NoetlError):
    """There is no alias of this name in the credentials file (NOETL_CREDENTIALS_FILE)."""


def playbooks_fault(exc: NoetlError) -> bool:
    """Whether an error raised while a pass evaluates the playbook (a template, a `set`,
    a loop's `in`) is the playbook's doing, and so the step's failure. History that
    could not be read (the engine's database away: StoreError; a replay's record
    without the answer: ReplayError) is not: it must end the pass (rolled back, run
    again), never fail a step that did nothing wrong."""
    return not isinstance(exc, (StoreError, ReplayError))
