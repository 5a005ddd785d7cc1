"""What `run` and `schedule add` read from the command line, refused with one line naming
the input and the limit before anything is written: `--payload` JSON, `--set` values,
the playbook FILE. The deep checks of the merged payload (NUL, surrogates, NaN, size as
stored) are the engine's (`Engine.check_payload`), shared with the Python API."""

from __future__ import annotations

import json
from typing import Any

import yaml

from noetl_celery.constants import DEFAULT_MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH
from noetl_celery.errors import PayloadInvalid
from noetl_celery.models.inputs import size_words
from noetl_celery.models.json_types import JSONObject
from noetl_celery.models.yaml_safe import YamlLimitExceeded, safe_load

__all__ = ["parse_payload", "parse_sets"]


def parse_sets(pairs: tuple[str, ...]) -> dict[str, Any]:
    """`--set KEY=VALUE` pairs; values are YAML-typed (`n=5` is a number), text that is
    not YAML stays a string, YAML past the loader's bounds is refused."""
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise PayloadInvalid("--set", f"expected KEY=VALUE, got {pair!r}")
        try:
            values[key] = safe_load(raw) if raw else ""
        except YamlLimitExceeded as exc:
            raise PayloadInvalid(f"--set {key}", exc.message) from None
        except (yaml.YAMLError, ValueError):  # ValueError: an int past 4300 digits
            values[key] = raw
    return values


def parse_payload(text: str | None, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> JSONObject:
    """`--payload JSON`: a JSON object. The text is measured before it is parsed, and
    json's own recursion guard (C code, it raises cleanly) turns a document too deep to
    parse into the depth error; shallower ones are bounded by `check_payload`."""
    if not text:
        return {}
    if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise PayloadInvalid(
            "--payload",
            f"larger than the limit of {size_words(max_bytes)} (NOETL_MAX_PAYLOAD_BYTES)",
        )
    try:
        value = json.loads(text)
    except RecursionError:
        raise PayloadInvalid(
            "--payload", f"nested deeper than the limit of {MAX_PAYLOAD_DEPTH} levels"
        ) from None
    except ValueError as exc:
        raise PayloadInvalid("--payload", f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise PayloadInvalid("--payload", f"must be a JSON object, not {type(value).__name__}")
    return value
