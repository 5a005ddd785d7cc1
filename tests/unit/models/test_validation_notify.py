"""Validation of `metadata.notify` and `metadata.deadline`: each bad block is one problem
naming its field and line; good ones pass."""

from __future__ import annotations

import pytest

from noetl_celery.models.validation import validate_text

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: t\n"
TAIL = "workflow:\n  - step: start\n    tool: {kind: noop}\n"


def problems(metadata: str) -> list[tuple[str | None, int | None, str]]:
    report = validate_text(HEAD + metadata + TAIL, "p.yaml")
    return [(p.field, p.line, p.message) for p in report.problems if p.severity == "error"]


@pytest.mark.parametrize(
    "metadata",
    [
        "  notify: {url: 'https://hooks.example/x', on: [failed, deadline], secret: s}\n",
        "  notify: {credential: ops_hook}\n",
        "  deadline: 2h\n",
        "  deadline: '06:00'\n  schedule: {cron: '0 3 * * *', timezone: Europe/Paris}\n",
    ],
)
def test_good_blocks_pass(metadata: str) -> None:
    assert problems(metadata) == []


@pytest.mark.parametrize(
    ("metadata", "field", "fragment"),
    [
        ("  notify: {url: 'https://h/x', on: [failed, oops]}\n", "metadata.notify", "'oops'"),
        ("  notify: {on: [failed]}\n", "metadata.notify", "exactly one of `url` or `credential`"),
        ("  notify: {url: 'hooks/x'}\n", "metadata.notify", "http:// or https://"),
        ("  deadline: 18:30\n", "metadata.deadline", "quoted time of day"),
        ("  deadline: soon\n", "metadata.deadline", "neither a duration"),
        (
            "  deadline: '06:00'\n  schedule: {cron: '0 3 * * *', timezone: Nowhere/X}\n",
            "metadata.deadline",
            "unknown time zone",
        ),
    ],
)
def test_bad_blocks_name_their_field(metadata: str, field: str, fragment: str) -> None:
    found = [p for p in problems(metadata) if p[0] == field]
    assert len(found) == 1, problems(metadata)
    assert fragment in found[0][2]
    assert found[0][1] == 5  # the line of the key under metadata


def test_a_secret_is_never_in_a_problem() -> None:
    found = problems("  notify: {url: 'https://h/x', secret: hush-9c1, on: [nope]}\n")
    assert found and all("hush-9c1" not in message for _, _, message in found)


def test_a_notify_credential_is_checked_against_the_credentials_file() -> None:
    from noetl_celery.models.validation.credentials import CredentialAliases

    text = HEAD + "  notify: {credential: ops_hok}\n" + TAIL
    known = CredentialAliases(frozenset({"ops_hook", "pg_main"}), "credentials file c.json")
    report = validate_text(text, "p.yaml", credentials=known)
    errors = [p for p in report.problems if p.severity == "error"]
    assert len(errors) == 1 and errors[0].field == "metadata.notify.credential"
    assert "credential `ops_hok` is not in credentials file c.json" in errors[0].message
    assert "ops_hook" in errors[0].message  # did you mean
    good = HEAD + "  notify: {credential: ops_hook}\n" + TAIL
    assert not [
        p
        for p in validate_text(good, "p.yaml", credentials=known).problems
        if p.severity == "error"
    ]
