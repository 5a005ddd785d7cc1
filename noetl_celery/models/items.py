"""A quarantined loop item's id, `step:epoch:iteration`, as `noetl-celery quarantine`
lists it and `show`/`redrive` take it back (pure; engine.readmodels and passes.rerun)."""

from __future__ import annotations

from noetl_celery.errors import InputInvalid

# epochs and iterations are Postgres INTEGER columns: a larger number must not reach SQL
_INT_MAX = 2**31 - 1


def item_id(step: str, epoch: int, iteration: int) -> str:
    return f"{step}:{epoch}:{iteration}"


def parse_item_id(text: str) -> tuple[str, int, int]:
    """`step:epoch:iteration` (a step name never holds `:`: validation refuses it)."""
    step, sep, rest = text.rpartition(":")
    step, sep2, epoch = step.rpartition(":")
    if not (
        sep
        and sep2
        and step
        and epoch.isascii()
        and epoch.isdigit()
        and rest.isascii()
        and rest.isdigit()
        and int(epoch) <= _INT_MAX
        and int(rest) <= _INT_MAX
    ):
        raise InputInvalid(
            "item",
            f"{text!r} is not a quarantined item id: use step:epoch:iteration, as "
            "`noetl-celery quarantine list` shows them",
        )
    return step, int(epoch), int(rest)
