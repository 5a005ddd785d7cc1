"""`set:` keys and where they write (docs/reference/dsl.md §1.6).

`ctx.<k>`, `step.<k>` and bare `<k>` all write the execution's flat variable map;
`iter.<k>` writes the running iteration's scope; `workload.<k>` is the same flat map.
"""

from __future__ import annotations

from typing import Literal

Scope = Literal["ctx", "iter"]
_CTX_PREFIXES = ("ctx.", "step.", "workload.", "vars.")


def split_set_key(key: str) -> tuple[Scope, str]:
    if key.startswith("iter."):
        return "iter", key[len("iter.") :]
    for prefix in _CTX_PREFIXES:
        if key.startswith(prefix):
            return "ctx", key[len(prefix) :]
    return "ctx", key
