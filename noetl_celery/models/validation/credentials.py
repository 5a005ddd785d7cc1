"""`auth:` aliases of postgres tools and cursors against the credentials file.

`validate` reads NOETL_CREDENTIALS_FILE at its composition root (the CLI) and passes the
aliases in: an alias the file lacks is an *error* (the tool would fail with "unknown
credential" at run time); without a file the alias cannot be checked, a *warning* once per
alias. A templated alias (`auth: "{{ workload.pg }}"`) is only known at run time and is
skipped. Registration and the engine pass nothing: workers may read another file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from noetl_celery.models.validation.base import (
    Collector,
    as_dict,
    as_list,
    did_you_mean,
    names_list,
)
from noetl_celery.models.validation.values import is_template
from noetl_celery.models.yaml_positions import Path

__all__ = ["CredentialAliases", "check_credentials"]

_AUTH_KEYS = ("key", "name", "credential", "alias")  # pgconn.auth_alias


@dataclass(frozen=True)
class CredentialAliases:
    """What `validate` knows of credentials: the aliases of the credentials file, or
    None when no file is configured (then aliases cannot be checked)."""

    aliases: frozenset[str] | None
    source: str = "the credentials file"


def check_credentials(
    collector: Collector, data: Mapping[str, Any], credentials: CredentialAliases
) -> None:
    reported: set[str] = set()
    for path, alias in _aliases(data):
        if credentials.aliases is None:
            if alias not in reported:
                collector.warning(
                    path,
                    f"credential `{alias}` is not checked: NOETL_CREDENTIALS_FILE is not set "
                    "(workers need a credentials file that defines it)",
                )
        elif alias not in credentials.aliases:
            known = sorted(credentials.aliases)
            hint = did_you_mean(alias, known) or f"; it defines: {names_list(known)}"
            collector.error(path, f"credential `{alias}` is not in {credentials.source}{hint}")
        reported.add(alias)


def _aliases(data: Mapping[str, Any]) -> Iterator[tuple[Path, str]]:
    """(path, alias) of every postgres tool and cursor naming a literal credential, and
    of a notification target's credential."""
    for index, raw in enumerate(as_list(data.get("workflow"))):
        step = as_dict(raw)
        tool = step.get("tool")
        if isinstance(tool, list):
            for position, task in enumerate(tool):
                yield from _tool_alias(("workflow", index, "tool", position), as_dict(task))
        else:
            yield from _tool_alias(("workflow", index, "tool"), as_dict(tool))
        cursor = as_dict(as_dict(step.get("loop")).get("cursor"))
        if cursor and cursor.get("kind", "postgres") == "postgres":
            yield from _alias_at(("workflow", index, "loop", "cursor", "auth"), cursor.get("auth"))
    for index, entry in enumerate(as_list(data.get("workbook"))):
        yield from _tool_alias(("workbook", index, "tool"), as_dict(as_dict(entry).get("tool")))
    # `metadata.notify: {credential: <alias>}`: the webhook's url and secret (models.notify)
    notify = as_dict(as_dict(data.get("metadata")).get("notify"))
    yield from _alias_at(("metadata", "notify", "credential"), notify.get("credential"))


def _tool_alias(path: Path, tool: Mapping[str, Any]) -> Iterator[tuple[Path, str]]:
    # (legacy `credential:` is an error of its own, validation.tools)
    if tool.get("kind") == "postgres":
        yield from _alias_at((*path, "auth"), tool.get("auth"))


def _alias_at(path: Path, auth: Any) -> Iterator[tuple[Path, str]]:
    if isinstance(auth, dict):
        key = next((k for k in _AUTH_KEYS if auth.get(k)), None)
        if key is None:
            return
        path, auth = (*path, key), auth[key]
    if isinstance(auth, str) and auth.strip() and not is_template(auth):
        yield path, auth.strip()
