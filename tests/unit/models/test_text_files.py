"""`models.text_files`: a file that is not UTF-8 text is one line naming the file, the
byte and its offset (or the UTF-16/32 byte-order mark), never a traceback."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from noetl_celery.constants import MAX_PLAYBOOK_BYTES
from noetl_celery.errors import InputInvalid
from noetl_celery.models.text_files import decode_utf8, read_text_file
from noetl_celery.models.validation import read_playbook, validate_file

ADVICE = "save the playbook as UTF-8"

NOT_UTF8: dict[str, tuple[bytes, str]] = {
    "latin-1 byte": (
        b"metadata: caf\xe9\n",
        f"x.yaml: not UTF-8 text (byte 0xe9 at offset 13); {ADVICE}",
    ),
    "0xff at offset 12": (
        b"name: hello \xff\n",
        f"x.yaml: not UTF-8 text (byte 0xff at offset 12); {ADVICE}",
    ),
    "UTF-16 little-endian": (
        codecs.BOM_UTF16_LE + "a: 1\n".encode("utf-16-le"),
        f"x.yaml: UTF-16 text found (byte-order mark 0xff 0xfe), not UTF-8; {ADVICE}",
    ),
    "UTF-16 big-endian": (
        codecs.BOM_UTF16_BE + "a: 1\n".encode("utf-16-be"),
        f"x.yaml: UTF-16 text found (byte-order mark 0xfe 0xff), not UTF-8; {ADVICE}",
    ),
    "UTF-32 little-endian": (
        codecs.BOM_UTF32_LE + "a: 1\n".encode("utf-32-le"),
        "x.yaml: UTF-32 text found (byte-order mark 0xff 0xfe 0x00 0x00), not UTF-8; " + ADVICE,
    ),
    "UTF-16 without a byte-order mark": (
        "a: 1\n".encode("utf-16-le"),
        "x.yaml: not a text file (NUL byte at offset 1; UTF-16 without a byte-order "
        f"mark?); {ADVICE}",
    ),
}


@pytest.mark.parametrize("name", sorted(NOT_UTF8))
def test_not_utf8_is_one_line_naming_byte_and_offset(name: str) -> None:
    data, message = NOT_UTF8[name]
    with pytest.raises(InputInvalid) as info:
        decode_utf8(data, "x.yaml")
    assert str(info.value) == message
    assert info.value.subject == "x.yaml"


@pytest.mark.parametrize(
    "data", [b"a: 1\n", "name: café ✓\n".encode(), codecs.BOM_UTF8 + b"a: 1\n", b""]
)
def test_utf8_decodes(data: bytes) -> None:
    assert decode_utf8(data, "x.yaml") == data.decode("utf-8")


def test_what_names_the_kind_of_file() -> None:
    with pytest.raises(InputInvalid, match="save the credentials file as UTF-8"):
        decode_utf8(b"\xff", "c.yaml", "credentials file")


def test_size_is_checked_before_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * 101)
    assert read_text_file(path, max_bytes=101) == "#" * 101
    with pytest.raises(InputInvalid) as info:
        read_text_file(path, max_bytes=100)
    assert str(info.value) == f"{path}: larger than the limit of 100 bytes for a playbook file"


def test_playbook_files_are_bounded_to_one_mebibyte(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (MAX_PLAYBOOK_BYTES + 1))
    with pytest.raises(InputInvalid) as info:
        read_playbook(path)
    assert str(info.value) == f"{path}: larger than the limit of 1 MiB for a playbook file"


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_unreadable_files_name_the_reason(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "nope.yaml"
    if kind == "directory":
        path.mkdir()
    reason = "No such file or directory" if kind == "missing" else "Is a directory"
    with pytest.raises(InputInvalid) as info:
        read_playbook(path)
    assert str(info.value) == f"{path}: cannot read the playbook file: {reason}"


def test_validate_file_reports_it_as_one_problem(tmp_path: Path) -> None:
    path = tmp_path / "u16.yaml"
    path.write_bytes(codecs.BOM_UTF16_LE + "a: 1\n".encode("utf-16-le"))
    report = validate_file(path)
    assert [str(p) for p in report.problems] == [
        f"{path}: UTF-16 text found (byte-order mark 0xff 0xfe), not UTF-8; {ADVICE}"
    ]
    assert report.problems[0].file == str(path) and not report.ok
