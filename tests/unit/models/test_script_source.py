"""The pure part of `script:`: parsing the mapping, guessing the source type."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_celery.models.script_source import (
    ScriptConfigError,
    StoredScripts,
    guess_type,
    parse_script,
    unsupported_message,
)


@pytest.mark.parametrize(
    ("uri", "kind"),
    [
        ("gs://b/x.py", "gcs"),
        ("S3://b/x.sql", "s3"),
        ("https://h/x.py", "http"),
        ("http://h/x.py", "http"),
        ("./scripts/x.py", "file"),
        ("/abs/x.sql", "file"),
        ("x.py", "file"),
    ],
)
def test_guess_type(uri: str, kind: str) -> None:
    assert guess_type(uri) == kind
    assert parse_script({"uri": uri}).type == kind


def test_file_source() -> None:
    found = parse_script({"uri": " ./s/x.py ", "source": {"type": "FILE"}})
    assert (found.type, found.uri) == ("file", "./s/x.py")
    assert parse_script("./s/x.py").uri == "./s/x.py"  # shorthand


def test_http_endpoint_wins_over_uri() -> None:
    found = parse_script(
        {
            "uri": "hello.py",
            "source": {
                "type": "http",
                "endpoint": "http://127.0.0.1:1/x/hello.py",
                "method": "get",
                "headers": {"X-Token": "t", "Dropped": None},
                "timeout": "5",
            },
        }
    )
    assert found.url == "http://127.0.0.1:1/x/hello.py"
    assert (found.method, found.headers, found.timeout) == ("GET", {"X-Token": "t"}, 5.0)
    assert parse_script({"uri": "http://h/y.py"}).url == "http://h/y.py"
    assert parse_script({"source": {"endpoint": "http://h/z.py"}}).type == "http"


def test_inline_source_carries_its_code() -> None:
    # NoETL tools' python.rs: `source.type: inline` with the code in `source.code`
    found = parse_script({"uri": "inline", "source": {"type": "inline", "code": "result = 1"}})
    assert (found.type, found.code, found.uri) == ("inline", "result = 1", "inline")
    assert parse_script({"source": {"code": "x = 2"}}).type == "inline"  # no uri, no type
    assert parse_script({"uri": "a.py", "source": {"code": "x"}}).type == "file"


@pytest.mark.parametrize(
    ("raw", "needle", "field"),
    [
        (["x.py"], "`script` must be a mapping", ""),
        ({"uri": "x", "source": "file"}, "`script.source` must be a mapping", "source"),
        ({"uri": "x", "source": {"type": "inline"}}, "needs its code as text", "source.code"),
        ({"source": {"type": "inline", "code": 3}}, "needs its code as text", "source.code"),
        ({"uri": "x", "source": {"type": "ftp"}}, "'ftp' is not one of file, http", "source.type"),
        ({"source": {"type": "file"}}, "a file script needs `uri`", "uri"),
        ({"source": {"type": "gcs"}}, "a gcs script needs `uri`", "uri"),
        ({"source": {"type": "http"}}, "needs `uri` or `source.endpoint`", "uri"),
        (
            {"uri": "http://h", "source": {"method": "FETCH"}},
            "'FETCH' is not one of",
            "source.method",
        ),
        ({"uri": "http://h", "source": {"headers": ["a"]}}, "must be a mapping", "source.headers"),
        ({"uri": "http://h", "source": {"timeout": "soon"}}, "not a duration", "source.timeout"),
        ({"uri": "http://h", "source": {"timeout": 0}}, "above 0", "source.timeout"),
    ],
)
def test_bad_script(raw: Any, needle: str, field: str) -> None:
    with pytest.raises(ScriptConfigError, match=needle) as caught:
        parse_script(raw)
    assert caught.value.field == field


def test_unsupported_message_names_the_step() -> None:
    message = unsupported_message("gcs", "step 'load'")
    assert message.startswith("step 'load': script source 'gcs' is not supported by noetl-celery")


def test_stored_scripts_round_trip() -> None:
    stored = StoredScripts(base_dir="/p", files={"./x.py": "result = 1"})
    assert StoredScripts.from_json(stored.to_json()) == stored
    assert StoredScripts.from_json(None) == StoredScripts()
    assert StoredScripts.from_json({"files": "junk"}).files == {}
