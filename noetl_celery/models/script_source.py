"""`script:` of python, postgres and duckdb tools: code kept outside the playbook.

NoETL's form (noetl/core/script/validation.py, noetl/worker/script_loader.py):

    script:
      uri: ./scripts/transform.py        # a path, http(s) URL, gs:// or s3:// URI
      source:
        type: file                       # file | http | gcs | s3 | inline (guessed if absent)
        code: "..."                      # inline: the code itself (NoETL tools' python.rs)
        endpoint: https://host/x.py      # http: the URL to fetch (wins over uri)
        method: GET
        headers: {Authorization: ...}
        timeout: 30

Pure: parsing and checking the mapping. Reading files (passes.scripts) and fetching
URLs (tools.script_fetch) happen elsewhere. An `inline` source carries its code in
`source.code` (NoETL tools' `PythonScriptSource`; `uri` is only a label then).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from noetl_celery.models.durations import not_a_duration, to_seconds

SOURCE_TYPES = ("file", "http", "gcs", "s3", "inline")
# NoETL reads these with cloud SDKs and credentials noetl-celery does not carry
UNSUPPORTED_TYPES = frozenset({"gcs", "s3"})
SCRIPT_KINDS = frozenset({"python", "postgres", "duckdb"})
HTTP_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
DEFAULT_HTTP_TIMEOUT = 30.0


class ScriptConfigError(ValueError):
    """The `script` mapping is malformed; `field` is the key under `script` at fault."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ScriptSource:
    type: str
    uri: str
    endpoint: str | None = None
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_HTTP_TIMEOUT
    encoding: str = "utf-8"
    code: str | None = None  # an inline source's code

    @property
    def url(self) -> str:
        """What an http source fetches: `source.endpoint`, else `uri` (NoETL's order)."""
        return self.endpoint or self.uri


def has_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def guess_type(uri: str) -> str:
    """The source type a `uri` implies when `source.type` is absent (NoETL's loader)."""
    lowered = uri.strip().lower()
    if lowered.startswith("gs://"):
        return "gcs"
    if lowered.startswith("s3://"):
        return "s3"
    if lowered.startswith(("http://", "https://")):
        return "http"
    return "file"


def parse_script(raw: Any) -> ScriptSource:
    """The source of a (rendered) `script` mapping; ScriptConfigError says what is wrong."""
    if isinstance(raw, str):
        raw = {"uri": raw}  # shorthand: `script: ./x.py`
    if not isinstance(raw, Mapping):
        raise ScriptConfigError("`script` must be a mapping with `uri` and `source.type`")
    source = raw.get("source") or {}
    if not isinstance(source, Mapping):
        raise ScriptConfigError("`script.source` must be a mapping with `type`", "source")
    uri = raw.get("uri")
    uri = uri.strip() if isinstance(uri, str) else ""
    endpoint = source.get("endpoint")
    endpoint = endpoint.strip() if isinstance(endpoint, str) and endpoint.strip() else None
    declared = source.get("type")
    code = source.get("code")
    if (declared is None or declared == "") and code is not None and not uri:
        declared = "inline"  # only code: NoETL's python tool takes inline as the default
    if declared is None or declared == "":
        kind = guess_type(uri or endpoint or "")
    elif isinstance(declared, str) and declared.strip().lower() in SOURCE_TYPES:
        kind = declared.strip().lower()
    else:
        raise ScriptConfigError(
            f"script source type '{declared}' is not one of {', '.join(SOURCE_TYPES)}",
            "source.type",
        )
    if kind == "inline":
        if not isinstance(code, str):
            raise ScriptConfigError(
                "an inline script needs its code as text in `source.code`", "source.code"
            )
        return ScriptSource(type=kind, uri=uri, code=code)
    if kind == "http":
        if not (uri or endpoint):
            raise ScriptConfigError("an http script needs `uri` or `source.endpoint`", "uri")
    elif not uri:
        raise ScriptConfigError(f"a {kind} script needs `uri`", "uri")
    return ScriptSource(
        type=kind,
        uri=uri,
        endpoint=endpoint,
        method=_method(source.get("method")),
        headers=_headers(source.get("headers")),
        timeout=_timeout(source.get("timeout")),
        encoding=str(raw.get("encoding") or "utf-8"),
    )


def _method(raw: Any) -> str:
    if raw is None or raw == "":
        return "GET"
    method = str(raw).strip().upper()
    if method not in HTTP_METHODS and not has_template(raw):
        raise ScriptConfigError(
            f"script source method '{raw}' is not one of {', '.join(HTTP_METHODS)}",
            "source.method",
        )
    return method


def _headers(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ScriptConfigError("`script.source.headers` must be a mapping", "source.headers")
    return {str(k): str(v) for k, v in raw.items() if v is not None}


def _timeout(raw: Any) -> float:
    if raw is None or raw == "" or has_template(raw):
        return DEFAULT_HTTP_TIMEOUT
    value = to_seconds(raw)
    if value is None:
        raise ScriptConfigError(f"script source timeout {not_a_duration(raw)}", "source.timeout")
    if value <= 0:
        raise ScriptConfigError("script source timeout must be above 0 seconds", "source.timeout")
    return value


def unsupported_message(kind: str, where: str) -> str:
    """The run-time error of a gcs/s3 source (validation only warns)."""
    return (
        f"{where}: script source '{kind}' is not supported by noetl-celery; "
        "use a file (stored with the catalog version) or an http(s) URL"
    )


@dataclass(frozen=True)
class StoredScripts:
    """File scripts read when the playbook was registered, kept with its catalog version
    so a worker on any machine runs them without the file. `files` maps the rendered
    `uri` to the text; `base_dir` is where the playbook file was (relative paths that
    only render at run time are looked up there, on a worker that has it)."""

    base_dir: str | None = None
    files: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"base_dir": self.base_dir, "files": dict(self.files)}

    @classmethod
    def from_json(cls, raw: Any) -> StoredScripts:
        if not isinstance(raw, Mapping):
            return cls()
        files = raw.get("files")
        base = raw.get("base_dir")
        return cls(
            base_dir=base if isinstance(base, str) else None,
            files={str(k): str(v) for k, v in files.items()} if isinstance(files, Mapping) else {},
        )
