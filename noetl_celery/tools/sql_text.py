"""Where the SQL of a postgres/duckdb tool comes from, and how it is cut into statements."""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, NotRequired, TypedDict

from noetl_celery.models.json_types import JSONObject


class StatementResult(TypedDict):
    """What a SQL tool (postgres, duckdb) answers for its last statement: the rows a
    query returned (at most the row limit) or the count and status of a command."""

    status: str
    row_count: int
    message: NotRequired[str | None]  # a command's status line
    rows: NotRequired[list[JSONObject]]  # a query's rows, values made JSON
    columns: NotRequired[list[str]]
    truncated: NotRequired[bool]  # more rows than the limit
    total_row_count: NotRequired[int]  # postgres: how many there were


# NoETL's field priority: base64 variants first, then the inline aliases.
B64_FIELDS = ("command_b64", "commands_b64", "query_b64")
TEXT_FIELDS = ("query", "queries", "command", "commands", "cmd", "cmds")

_CACHE_MAX_CHARS = 16_384
_FIRST_WORD = re.compile(r"\s*([A-Za-z_]+)")


class SqlSourceError(ValueError):
    """The tool config holds no usable SQL (a config error, not a database error)."""


def extract_sql(config: Mapping[str, Any], tool: str) -> str:
    """The SQL text of a tool config; SqlSourceError when there is none."""
    for name in B64_FIELDS:
        raw = config.get(name)
        if raw:
            try:
                # line breaks are common in pasted base64; anything else invalid is an error
                compact = "".join(str(raw).split())
                return base64.b64decode(compact, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError) as exc:
                raise SqlSourceError(f"{tool} tool: `{name}` is not valid base64 UTF-8") from exc
    for name in TEXT_FIELDS:
        raw = config.get(name)
        if raw is None or raw == "":
            continue
        if isinstance(raw, list | tuple):
            return "\n".join(str(part) for part in raw if part is not None)
        return str(raw)
    raise SqlSourceError(f"{tool} tool needs `command` or `query`")


def _is_blank(statement: str) -> bool:
    """True when a statement holds nothing but comments, whitespace and semicolons."""
    if ("--" not in statement and "/*" not in statement) or _shape(statement) != _OTHER:
        return not statement.strip().strip(";").strip()  # no comment: no need to parse
    import sqlparse

    stripped = sqlparse.format(statement, strip_comments=True)
    return not stripped.strip().strip(";").strip()


# What may end a statement or hide one outside quotes: `;`, comments, dollar quotes.
# Quoted strings and identifiers are matched whole, with their doubled-quote escapes, so
# what they hold (rendered JSON, a '; --' in a value) is skipped over at C speed instead
# of lexed token by token.
_SCAN = re.compile(r"""'[^']*(?:''[^']*)*'|"[^"]*(?:""[^"]*)*"|(?P<mark>--|/\*|\$|;)""")


# what _shape finds outside quotes
_ONE, _SEMICOLONS, _OTHER = "one", "semicolons", "other"
_QUOTED = re.compile(r"'[^']*(?:''[^']*)*'" + r'|"[^"]*(?:""[^"]*)*"')


def _shape(text: str) -> str:
    """What `text` holds outside its quoted strings and identifiers: _ONE, one statement
    for certain (no mark but trailing `;`); _SEMICOLONS, no mark but `;` (quotes can then
    be masked for sqlparse, see _split_masked); _OTHER, a comment, a dollar quote or a
    backslash before a quote (sqlparse must read it all)."""
    if "\\'" in text or '\\"' in text:
        # a backslash before a quote: sqlparse reads an escape there (E'' strings do;
        # standard ones do not), so only it may say where such a string ends
        return _OTHER
    several = False
    for match in _SCAN.finditer(text):
        mark = match.group("mark")
        if mark is None:
            continue  # a quoted string or identifier
        if mark != ";":
            return _OTHER
        if not several and text[match.end() :].strip(" \t\r\n;"):
            several = True
    return _SEMICOLONS if several else _ONE


# what _split_masked masks: quoted strings and identifiers, and runs of digits (a number,
# or part of a name: neither can hold a cut). What two renders of one SQL template
# differ in is mostly these, so their masked texts are one and sqlparse lexes it once.
_MASKED = re.compile(_QUOTED.pattern + r"|\d+")


def _split_masked(text: str) -> list[str]:
    """sqlparse's statements of `text` (no comment, dollar quote or backslash before a
    quote: _shape), each quoted string and identifier shown to it as `'q'` / `"q"` and
    each run of digits as `0`: it cuts the same places (only `;` outside quotes, and its
    own BEGIN ... END rules, can) without lexing the values. The cuts are mapped back
    onto `text`."""
    pieces: list[str] = []
    ends: list[int] = []  # where each mask ends in the masked text
    growth: list[int] = []  # how much shorter the masked text is up to there
    at = position = grown = 0
    for match in _MASKED.finditer(text):
        first = match.group()[0]
        mask = "'q'" if first == "'" else '"q"' if first == '"' else "0"
        gap = text[at : match.start()]
        pieces += [gap, mask]
        position += len(gap) + len(mask)
        grown += match.end() - match.start() - len(mask)
        ends.append(position)
        growth.append(grown)
        at = match.end()
    pieces.append(text[at:])

    def original(cut: int) -> int:  # a cut is never inside a mask: one token to sqlparse
        index = bisect.bisect_right(ends, cut) - 1
        return cut + (growth[index] if index >= 0 else 0)

    out, start = [], 0
    masked = "".join(pieces)
    stops = _stops_cached(masked) if len(masked) <= _CACHE_MAX_CHARS else _stops(masked)
    for stop in stops:
        out.append(text[original(start) : original(stop)].strip())
        start = stop
    return out


@lru_cache(maxsize=256)
def _stops_cached(masked: str) -> tuple[int, ...]:
    return _stops(masked)


def _stops(masked: str) -> tuple[int, ...]:
    """Where sqlparse ends each statement of `masked` (what sqlparse.split runs: it keeps
    only the stripped text, we need the lengths)."""
    from sqlparse.engine import FilterStack

    stops, stop = [], 0
    # sqlparse has no type hints
    for statement in FilterStack().run(masked):  # type: ignore[no-untyped-call]
        stop += len(str(statement))
        stops.append(stop)
    return tuple(stops)


def split_statements(sql: str) -> tuple[str, ...]:
    """Statements of `sql` in order, without empty or comment-only ones.

    sqlparse respects quotes, comments and `$tag$` dollar quoting, so a `DO $$ ... ; $$`
    block stays whole. Short texts are cached: a loop runs the same SQL many times, and
    big rendered scripts would only fill the cache with one-offs.
    """
    return _split_cached(sql) if len(sql) <= _CACHE_MAX_CHARS else _split(sql)


@lru_cache(maxsize=256)
def _split_cached(sql: str) -> tuple[str, ...]:
    return _split(sql)


def _split(sql: str) -> tuple[str, ...]:
    text = sql.strip()
    if not text:
        return ()
    body = text.rstrip(";").rstrip()
    if not body:
        return ()
    # Fast path (most steps): one statement, no comments. sqlparse lexes in Python: a
    # rendered INSERT carrying a page of JSON cost a per-row PFT drain a quarter of its
    # workers' CPU (issue 15), though its `;` and `--` were all inside the string.
    if ";" not in body and "--" not in body and "/*" not in body:
        return (text,)
    shape = _shape(text)
    if shape == _ONE:
        return (text,)
    if shape == _SEMICOLONS:
        statements: Iterable[str] = _split_masked(text)
    else:
        import sqlparse  # lazy: only needed for commented or dollar-quoted SQL

        statements = (s.strip() for s in sqlparse.split(text))
    return tuple(s for s in statements if s and not _is_blank(s))


def first_keyword(statement: str) -> str:
    """The statement's leading keyword in upper case (comments skipped), or ""."""
    if "--" in statement or "/*" in statement:
        import sqlparse

        statement = sqlparse.format(statement, strip_comments=True)
    match = _FIRST_WORD.match(statement)
    return match.group(1).upper() if match else ""
