"""What the engine database says when it cannot be used: one line each, naming the
database as shown (password masked) and what to do (store.database raises them)."""

from __future__ import annotations

from sqlalchemy import make_url
from sqlalchemy.exc import ArgumentError

from noetl_celery.store.schema import SCHEMA_REVISION

UPGRADE = "run `noetl-celery db upgrade`"


def known_revisions() -> frozenset[str]:
    from noetl_celery.store.migrate import revisions

    return revisions()


def outdated_message(shown: str, revision: str | None) -> str:
    if revision is None:
        return (
            f"the engine database {shown} has no engine tables, this noetl-celery needs "
            f"{SCHEMA_REVISION}: {UPGRADE}"
        )
    if revision not in known_revisions():
        return (
            f"the engine database {shown} is at revision {revision}, which this "
            f"noetl-celery (revision {SCHEMA_REVISION}) does not know: a newer noetl-celery "
            "migrated it; upgrade noetl-celery"
        )
    return (
        f"the engine database {shown} is at revision {revision}, this noetl-celery needs "
        f"{SCHEMA_REVISION}: {UPGRADE}"
    )


def unusable_message(shown: str, url: str, exc: BaseException) -> str:
    """One line: which database, why the driver gave up, what to do."""
    found = masked_reason(url, exc)
    low = found.lower()
    if url.startswith("sqlite"):
        hint = "check the path in NOETL_DATABASE_URL (or NOETL_HOME) and its permissions"
    elif "database" in low and "does not exist" in low:
        hint = f"create the database, then {UPGRADE}"
    elif "password" in low or "authentication" in low or "role" in low:
        hint = "check the user and password in NOETL_DATABASE_URL"
    else:
        hint = "check NOETL_DATABASE_URL (host, port, options) and that Postgres runs there"
    return f"the engine database {shown} cannot be used: {found}; {hint}"


def failed_message(shown: str, url: str, exc: BaseException) -> str:
    """One line: the database could not do a statement for a reason of its own."""
    hint = (
        "check the disk and that no other process holds the file's write lock"
        if url.startswith("sqlite")
        else "check the server's log (disk, memory, connections)"
    )
    return (
        f"the engine database {shown} could not do a statement: {masked_reason(url, exc)}; {hint}"
    )


def interrupted_message(shown: str, url: str, exc: BaseException) -> str:
    """One line: a connection in use was lost (ended by the server, or broken)."""
    return (
        f"the connection to the engine database {shown} was lost (a transaction on it "
        f"is rolled back): {masked_reason(url, exc)}"
    )


def masked_reason(url: str, exc: BaseException) -> str:
    found = error_reason(exc)
    try:
        parsed = make_url(url)
        password, names = parsed.password, {parsed.username, parsed.host, parsed.database}
    except (ArgumentError, ValueError):
        password, names = None, set()
    # a password that is also the URL's user, host or database name (compose's
    # noetl:noetl@.../noetl) is not masked as a word: `shown` prints that name anyway, and
    # masking it would blank `database "noetl" does not exist`, the one useful fact
    if password and str(password) not in names:
        found = found.replace(str(password), "***")
    return found


def error_reason(exc: BaseException) -> str:
    """The driver's own words, without libpq's preambles: the last `...failed: ` clause
    of the most specific line (psycopg lists every address it tried)."""
    lines = [ln.strip(" \t-") for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    failed = [ln for ln in lines if "failed: " in ln]
    line = failed[-1] if failed else lines[0]
    found = line.rsplit("failed: ", 1)[-1] if "failed: " in line else line
    for prefix in ("FATAL:", "ERROR:"):
        found = found.removeprefix(prefix)
    return " ".join(found.split())[:300]


def milliseconds(seconds: float) -> int:
    """A Postgres duration setting in milliseconds (0: no limit)."""
    return max(0, round(seconds * 1000))


def short_error(exc: BaseException) -> str:
    return " ".join(str(exc).strip().splitlines()[0].split())[:300]
