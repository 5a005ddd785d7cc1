"""Execution ids: time-ordered decimal strings, like NoETL's snowflake ids."""

from __future__ import annotations

import secrets
import time

_EPOCH_MS = 1_704_067_200_000  # 2024-01-01, NoETL's snowflake epoch


def new_execution_id() -> str:
    millis = int(time.time() * 1000) - _EPOCH_MS
    return str((millis << 22) | secrets.randbits(22))
