"""Reading a user's text file (a playbook, a credentials file) as UTF-8, or one line
saying why not: too large, not UTF-8 (which byte, where), UTF-16/32 (an editor's
"Unicode" setting), or unreadable. Never a traceback (design invariant 8)."""

from __future__ import annotations

import codecs
from pathlib import Path

from noetl_celery.errors import InputInvalid
from noetl_celery.models.inputs import size_words

__all__ = ["decode_utf8", "read_text_file"]

# UTF-32 first: its little-endian mark starts with UTF-16's
_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def decode_utf8(data: bytes, name: str, what: str = "playbook") -> str:
    """`data` as text; `name` labels the error, `what` says what to save as UTF-8."""
    advice = f"save the {what} as UTF-8"
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            marks = " ".join(f"0x{b:02x}" for b in bom)
            raise InputInvalid(
                name, f"{encoding} text found (byte-order mark {marks}), not UTF-8; {advice}"
            )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputInvalid(
            name, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); {advice}"
        ) from None
    nul = text.find("\x00")
    if nul >= 0:  # valid UTF-8, but no text file has NULs: UTF-16 without a mark does
        raise InputInvalid(
            name,
            f"not a text file (NUL byte at offset {len(text[:nul].encode())}; UTF-16 "
            f"without a byte-order mark?); {advice}",
        )
    return text


def read_text_file(
    path: str | Path, *, max_bytes: int | None = None, what: str = "playbook"
) -> str:
    """The file's text. Raises `InputInvalid` naming the file when it cannot be read,
    is larger than `max_bytes` (checked before reading it whole) or is not UTF-8."""
    name = str(path)
    try:
        with Path(path).open("rb") as fh:
            data = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputInvalid(name, f"cannot read the {what} file: {exc.strerror or exc}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise InputInvalid(
            name, f"larger than the limit of {size_words(max_bytes)} for a {what} file"
        )
    return decode_utf8(data, name, what)
