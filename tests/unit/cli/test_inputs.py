"""`cli.inputs`: `--payload` and `--set` refused with one line naming the option (or
key) and the limit, before anything is parsed deeply or written."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from noetl_celery.cli.inputs import parse_payload, parse_sets
from noetl_celery.cli.targets import read_target
from noetl_celery.errors import InputInvalid, PayloadInvalid

BOMB = (
    "{a: &a [x, x, x, x, x, x, x, x, x], b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a], "
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b], d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c], "
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d], f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e], "
    "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]}"
)

BAD_PAYLOADS: dict[str, tuple[str, str]] = {
    "10,000 deep (json.loads recursion)": (
        '{"a": ' + "[" * 10_000 + "]" * 10_000 + "}",
        "--payload: nested deeper than the limit of 64 levels",
    ),
    "not JSON": (
        "{a: 1}",
        "--payload: not valid JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)",
    ),
    "not an object": ("[1, 2]", "--payload: must be a JSON object, not list"),
    "larger than the limit": (
        '{"a": "' + "x" * 100 + '"}',
        "--payload: larger than the limit of 64 bytes (NOETL_MAX_PAYLOAD_BYTES)",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_PAYLOADS))
def test_bad_payload_text(name: str) -> None:
    text, message = BAD_PAYLOADS[name]
    with pytest.raises(PayloadInvalid) as info:
        parse_payload(text, max_bytes=64 if "larger" in name else 16 << 20)
    assert str(info.value) == message


def test_payload_text_at_the_limit_parses() -> None:
    text = '{"a": "' + "x" * 10 + '"}'
    assert parse_payload(text, max_bytes=len(text)) == {"a": "x" * 10}


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        (
            "deep=" + "[" * 100 + "]" * 100,
            "--set deep: YAML nested deeper than the limit of 64 levels",
        ),
        (
            f"bomb={BOMB}",
            "--set bomb: YAML aliases (*name) expand this document past the limit of "
            "100,000 nodes (an alias bomb?); it was not expanded",
        ),
        ("novalue", "--set: expected KEY=VALUE, got 'novalue'"),
        ("=5", "--set: expected KEY=VALUE, got '=5'"),
    ],
)
def test_bad_set_values(pair: str, message: str) -> None:
    started = time.process_time()
    with pytest.raises(PayloadInvalid) as info:
        parse_sets((pair,))
    assert str(info.value) == message
    assert time.process_time() - started < 1.0


def test_set_values_are_yaml_typed_and_text_stays_text() -> None:
    values = parse_sets(("n=5", "flag=true", "items=[1, 2]", "bad=[unclosed", "empty=", "d=x=y"))
    assert values == {
        "n": 5,
        "flag": True,
        "items": [1, 2],
        "bad": "[unclosed",
        "empty": "",
        "d": "x=y",
    }


def test_set_integer_past_the_digit_limit_stays_text() -> None:
    digits = "9" * 5000
    assert parse_sets((f"n={digits}",)) == {"n": digits}


def test_run_target_reads_files_within_bounds_and_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("a: 1\n")
    assert read_target(str(path)).text == "a: 1\n"
    assert {**parse_payload('{"x": 1, "y": 1}'), **parse_sets(("y=2",))} == {"x": 1, "y": 2}
    path.write_bytes(b"a: \xff\n")
    with pytest.raises(InputInvalid) as info:
        read_target(str(path))
    assert str(info.value) == (
        f"{path}: not UTF-8 text (byte 0xff at offset 3); save the playbook as UTF-8"
    )
