"""The orchestrator's limits (orchestrator.decisions.Limits) as the settings give them."""

from __future__ import annotations

from noetl_celery.orchestrator.decisions import Limits
from noetl_celery.settings import Settings


def limits_of(settings: Settings) -> Limits:
    return Limits(
        default_parallel_window=settings.default_parallel_window,
        loop_results_cap=settings.loop_results_cap,
        template_mode=settings.template_mode,
        claim_attempts=settings.claim_max_attempts,
        cursor_chain=settings.cursor_chain,
        claim_retry_delay_seconds=settings.claim_retry_delay_seconds,
        max_retry_delay_seconds=settings.max_retry_delay_seconds,
        release_horizon_seconds=settings.throttle_release_seconds,
    )
