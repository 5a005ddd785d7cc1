"""`models.inputs.check_payload`: every bad payload is one line naming the key path and
the limit, found without recursion; good payloads pass untouched."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import time
import uuid
from typing import Any

import pytest

from noetl_celery.constants import MAX_PAYLOAD_DEPTH
from noetl_celery.errors import InputInvalid, NoetlError, PayloadInvalid
from noetl_celery.models import inputs
from noetl_celery.models.inputs import PayloadLimits, check_payload


def nested(depth: int, leaf: Any = 1) -> dict[str, Any]:
    """{"a": {"a": ... leaf}} with `depth` mappings, built without recursion."""
    value: Any = leaf
    for _ in range(depth):
        value = {"a": value}
    assert isinstance(value, dict)
    return value


def deep_lists(depth: int) -> dict[str, Any]:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return {"a": value}


class Opaque:
    pass


# (payload, the exact error line)
BAD: dict[str, tuple[Any, str]] = {
    "NUL in a list item": (
        {"a": {"b": [0, 1, 2, "x\x00y"]}},
        "payload.a.b[3]: contains a NUL character (\\u0000), which Postgres cannot store",
    ),
    "lone surrogate": (
        {"a": "x\ud800y"},
        "payload.a: contains a lone surrogate (\\ud800), which is not valid Unicode text "
        "and Postgres cannot store it",
    ),
    "argv byte that was not UTF-8": (
        {"a": ["ok", "caf\udce9"]},
        "payload.a[1]: contains a lone surrogate (\\udce9), which is not valid Unicode text "
        "and Postgres cannot store it",
    ),
    "NUL in a key": (
        {"a": {"x\x00y": 1}},
        'payload.a: the key "x\\u0000y" contains a NUL character (\\u0000), which Postgres '
        "cannot store",
    ),
    "surrogate in a top-level key": (
        {"\udfff": 1},
        'payload: the key "\\udfff" contains a lone surrogate (\\udfff), which is not valid '
        "Unicode text and Postgres cannot store it",
    ),
    "NaN under a quoted key": (
        {"a b": {"c": float("nan")}},
        'payload["a b"].c: is nan (not a finite number), which JSON cannot carry and '
        "Postgres cannot store",
    ),
    "infinity": (
        {"x": [float("-inf")]},
        "payload.x[0]: is -inf (not a finite number), which JSON cannot carry and "
        "Postgres cannot store",
    ),
    "Decimal NaN": (
        {"x": decimal.Decimal("NaN")},
        "payload.x: is NaN (not a finite number), which JSON cannot carry and Postgres "
        "cannot store",
    ),
    "NUL in bytes": (
        {"x": b"a\x00"},
        "payload.x: contains a NUL character (\\u0000), which Postgres cannot store",
    ),
    "an object": (
        {"x": {"y": Opaque()}},
        "payload.x.y: is a value of type Opaque, which cannot be stored as JSON (use "
        "strings, numbers, booleans, null, lists and mappings)",
    ),
    "a tuple key": (
        {"x": {(1, 2): 3}},
        "payload.x: has a key of type tuple; JSON keys are strings",
    ),
    "an integer json cannot write": (
        {"n": 10**5000},
        "payload.n: is an integer too long to write as JSON",
    ),
    "not a mapping": ([1, 2], "payload: must be a mapping (a JSON object), not list"),
    "depth 65 of mappings": (
        nested(MAX_PAYLOAD_DEPTH + 1),
        "payload.a.a.a.a.a.a.a.a.a.a…(64 keys deep): nested deeper than the limit of 64 levels",
    ),
    "depth 65 of lists": (
        deep_lists(MAX_PAYLOAD_DEPTH),
        "payload.a[0][0][0][0][0][0][0][0][0]…(64 keys deep): nested deeper than the "
        "limit of 64 levels",
    ),
    "depth 500 (left an execution RUNNING before)": (
        nested(500),
        "payload.a.a.a.a.a.a.a.a.a.a…(64 keys deep): nested deeper than the limit of 64 levels",
    ),
    "problem in reading order": (
        {"first": {"x": "\x00"}, "second": "\x00"},
        "payload.first.x: contains a NUL character (\\u0000), which Postgres cannot store",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_payloads_name_the_key_path_and_the_limit(name: str) -> None:
    payload, message = BAD[name]
    with pytest.raises(PayloadInvalid) as info:
        check_payload(payload)
    assert str(info.value) == message
    assert "\n" not in str(info.value)
    assert isinstance(info.value, InputInvalid) and isinstance(info.value, NoetlError)


GOOD: dict[str, Any] = {
    "empty": {},
    "none is an empty payload": None,
    "depth 64 exactly": nested(MAX_PAYLOAD_DEPTH),
    "json scalars": {"s": "héllo ✓ 😀", "i": -3, "f": 1.5, "b": True, "n": None},
    "what the store encodes": {
        "when": dt.datetime(2026, 11, 22, 6, 0),
        "day": dt.date(2026, 11, 22),
        "at": dt.time(6, 0),
        "id": uuid.UUID(int=1),
        "amount": decimal.Decimal("1.25"),
        "tags": {"a", "b"},
        "frozen": frozenset({1}),
        "pair": (1, [2, 3]),
        "raw": b"bytes",
    },
    "non-string scalar keys": {1: "one", 2.5: "x", False: "f", None: "n"},
    "a backslash-u0000 text is not a NUL": {"sql": "select '\\u0000'"},
    "a joined surrogate pair": {"emoji": json.loads('"\\ud83d\\ude00"')},
}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_good_payloads_pass(name: str) -> None:
    check_payload(GOOD[name])


def payload_of_json_size(size: int) -> dict[str, Any]:
    """{"a":"xxx..."} of exactly `size` bytes of compact JSON."""
    payload = {"a": "x" * (size - len('{"a":""}'))}
    assert len(json.dumps(payload, separators=(",", ":"))) == size
    return payload


def test_size_limit_is_exact_in_compact_json_bytes() -> None:
    limits = PayloadLimits(max_bytes=1000)
    check_payload(payload_of_json_size(1000), limits)
    with pytest.raises(PayloadInvalid) as info:
        check_payload(payload_of_json_size(1001), limits)
    assert str(info.value) == (
        "payload: larger than the limit of 1,000 bytes as JSON (NOETL_MAX_PAYLOAD_BYTES)"
    )


def test_size_counts_utf8_bytes() -> None:
    limits = PayloadLimits(max_bytes=12)
    check_payload({"a": "éé"}, limits)  # {"a":"éé"} is 12 bytes
    with pytest.raises(PayloadInvalid, match="larger than the limit of 12 bytes"):
        check_payload({"a": "ééé"}, limits)


def test_default_size_limit_names_mebibytes() -> None:
    with pytest.raises(PayloadInvalid) as info:
        check_payload({"a": "x" * (16 * 1024 * 1024)})
    assert str(info.value) == (
        "payload: larger than the limit of 16 MiB as JSON (NOETL_MAX_PAYLOAD_BYTES)"
    )


def test_the_root_name_is_the_callers() -> None:
    with pytest.raises(PayloadInvalid) as info:
        check_payload({"k": "\x00"}, root="schedule payload")
    assert str(info.value).startswith("schedule payload.k: contains a NUL")
    assert info.value.subject == "schedule payload.k"


def test_a_very_deep_payload_is_refused_without_recursion() -> None:
    """100,000 levels: any recursive walk (json, repr, pydantic) would overflow."""
    with pytest.raises(PayloadInvalid, match="nested deeper than the limit of 64 levels"):
        check_payload(nested(100_000))


@pytest.mark.parametrize("kind", ["dict", "list"])
def test_cycles_are_refused(kind: str) -> None:
    payload: dict[str, Any] = {}
    if kind == "dict":
        payload["self"] = payload
    else:
        loop: list[Any] = []
        loop.append(loop)
        payload["loop"] = loop
    with pytest.raises(PayloadInvalid, match="nested deeper than the limit of 64 levels"):
        check_payload(payload)


class NoDumps:
    """Stands in for `json` in models.inputs: reaching json.dumps would expand the bomb."""

    @staticmethod
    def dumps(*args: Any, **kwargs: Any) -> str:
        raise AssertionError("the shape walk must refuse this before json.dumps")


def test_shared_references_cannot_expand_without_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """10^12 elements when expanded (what json.dumps would write), built from 13 lists."""
    value: Any = [1] * 10
    for _ in range(11):
        value = [value] * 10
    monkeypatch.setattr(inputs, "json", NoDumps)
    started = time.process_time()
    with pytest.raises(PayloadInvalid, match="larger than the limit of 1 MiB as JSON"):
        check_payload({"bomb": value}, PayloadLimits(max_bytes=1 << 20))
    assert time.process_time() - started < 2.0


def test_a_large_clean_payload_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """~2 MB of clean rows: one shape walk and one json.dumps, never the slow walk that
    looks for where a problem is (it runs only when the fast path found one)."""
    rows = [{"id": i, "name": f"n{i}", "v": [1.5, 2, None]} for i in range(50_000)]
    dumps = []
    real_dumps = json.dumps

    def counting_dumps(value: Any, **kwargs: Any) -> str:
        dumps.append(1)
        return real_dumps(value, **kwargs)

    def no_slow_walk(*args: Any) -> None:
        raise AssertionError("the slow walk ran on a clean payload")

    monkeypatch.setattr(json, "dumps", counting_dumps)
    monkeypatch.setattr(inputs, "_raise_found", no_slow_walk)
    check_payload({"rows": rows})
    assert dumps == [1]
