"""Notifications (issue 32): who is told (`Rule`, installed as the store's
`notifications.rule`), and the deliverer that POSTs the outbox's rows (`Deliverer`,
repeated by `DelivererThread` in every worker process, `serve`, and the embedded
process; docs/operations/notifications.md).

Delivery is at least once: a row is claimed with a lease, POSTed, and marked delivered
on a 2xx; any other answer (or none) records the error and the attempt and makes the row
due again after an exponential backoff (NOETL_NOTIFY_BACKOFF_SECONDS, doubled per
failure, capped by NOETL_NOTIFY_BACKOFF_MAX_SECONDS). Every POST of a row carries the
same `id` (X-Noetl-Notification-Id): receivers dedupe by it. A target's url and secret
are resolved here, at delivery, from the settings, the playbook or the credentials file:
the database holds neither, and no log line or error names them."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from noetl_celery.engine.periodic import Periodic
from noetl_celery.engine.summaries import error_text, quarantined_items, run_errors
from noetl_celery.errors import NoetlError
from noetl_celery.models.notify import (
    DEADLINE_EVENTS,
    ERRORS_LISTED,
    ID_HEADER,
    SIGNATURE_HEADER,
    TARGET_ENGINE,
    TARGET_PLAYBOOK,
    PlaybookNotify,
    backoff_seconds,
    notify_of,
    on_of,
    sign,
    summary_text,
)
from noetl_celery.passes.playbooks import PlaybookCache
from noetl_celery.settings_notify import NotifySettings
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ExecutionRow, NotificationRow
from noetl_celery.tools.credentials import CredentialStore

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("noetl_celery.notify")

DELIVER_SECONDS = 1.0  # how often a deliverer looks for due rows
CLAIM_SECONDS = 60.0  # a deliverer that died holding rows gives them up after this long
POST_TIMEOUT_SECONDS = 10.0
ERROR_CHARS = 300


def playbook_notify(playbooks: PlaybookCache, catalog_id: int) -> PlaybookNotify | None:
    try:
        playbook = playbooks.get(catalog_id)
    except NoetlError:  # a catalog row that no longer validates: the engine's target only
        return None
    return notify_of(playbook.metadata.model_extra or {})


class Rule:
    """Who wants an event: the engine-wide target (NOETL_NOTIFY_URL with NOETL_NOTIFY_ON)
    and the playbook's `metadata.notify` (its `on`).

    With `defer_engine` (a client outside the fleet: `cancel` from a laptop, whose
    environment need not hold the fleet's webhook), the engine-wide row is written for
    every event and the fleet's deliverers decide with their own settings (a row they do
    not want is marked skipped)."""

    def __init__(
        self, settings: NotifySettings, playbooks: PlaybookCache, defer_engine: bool = False
    ) -> None:
        self.settings = settings
        self.playbooks = playbooks
        self.defer_engine = defer_engine

    def targets(self, catalog_id: int, event: str) -> list[str]:
        wanted = on_of(event)
        out = []
        if self.defer_engine or (self.settings.url and wanted in self.settings.on):
            out.append(TARGET_ENGINE)
        declared = playbook_notify(self.playbooks, catalog_id)
        if declared is not None and wanted in declared.on:
            out.append(TARGET_PLAYBOOK)
        return out


def shown_url(url: str) -> str:
    """`https://host/…`: a webhook's path and query are often its secret (Slack's)."""
    parsed = urlsplit(url)
    host = parsed.hostname or "?"
    return f"{parsed.scheme}://{host}{f':{parsed.port}' if parsed.port else ''}/…"


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat() + "Z"


def payload(
    store: Store, settings: NotifySettings, note: NotificationRow, row: ExecutionRow
) -> dict[str, Any]:
    """The JSON body of `note` (docs/operations/notifications.md)."""
    error = error_text(row.error) if row.error else None
    errors = [dict(e) for e in run_errors(store, row, ERRORS_LISTED)]
    if note.event in DEADLINE_EVENTS:
        seconds = (note.created_at - row.created_at).total_seconds()
        status = note.event
    else:
        seconds = row.duration_seconds
        status = row.status.lower()
    url = f"{settings.public_url}/executions/{row.execution_id}" if settings.public_url else None
    return {
        "id": note.notification_id,
        "execution_id": row.execution_id,
        "path": row.path,
        "event": note.event,
        "status": status,
        "error": error,
        "errors": errors,
        "quarantined": quarantined_items(store, row),
        "started_at": _iso(row.created_at),
        "finished_at": _iso(row.finished_at),
        "trigger": row.trigger,
        "url": url,
        "text": summary_text(row.path, note.event, seconds, error),
    }


class Deliverer:
    """One look at the outbox (`tick`): POST every due row, record each try."""

    def __init__(
        self,
        store: Store,
        settings: NotifySettings,
        playbooks: PlaybookCache,
        credentials: Callable[[], CredentialStore],
        client: httpx.Client | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.playbooks = playbooks
        self.credentials = credentials
        self._client = client  # made at the first POST: httpx is slow to import
        self.delivered = 0  # this deliverer's successful POSTs (tests, logs)
        # a deliverer without NOETL_NOTIFY_URL leaves the engine-wide rows to those with it
        self.targets = [TARGET_PLAYBOOK] + ([TARGET_ENGINE] if settings.url else [])

    def tick(self) -> int:
        """Deliver one batch of due rows (the next tick takes the next batch: a row
        retried within its backoff never keeps one tick going); the number delivered."""
        return self._batch(None)[1]

    def flush(self, budget: float) -> int:
        """Batches until nothing is due or `budget` seconds are spent (an embedded
        process about to exit); rows claimed and not tried wait out their claim."""
        stop = time.monotonic() + budget
        sent = 0
        while time.monotonic() < stop:
            claimed, delivered = self._batch(stop)
            sent += delivered
            if not claimed:
                break
        return sent

    def _batch(self, stop: float | None) -> tuple[int, int]:
        """(rows claimed, rows delivered) of one batch."""
        if not self.store.notifications.any_due(self.targets):
            return 0, 0
        notes = self.store.notifications.claim(CLAIM_SECONDS, self.targets)
        sent = 0
        for note in notes:
            if stop is not None and time.monotonic() >= stop:
                break
            sent += self.deliver(note)
        return len(notes), sent

    def target(self, note: NotificationRow, row: ExecutionRow) -> tuple[str, str | None]:
        """The url and secret of `note`'s target (ConfigurationError/CredentialError: a
        credential gone or without `url`)."""
        if note.target == TARGET_ENGINE:
            return self.settings.url, self.settings.secret or None
        declared = playbook_notify(self.playbooks, row.catalog_id)
        if declared is None:
            raise NoetlError("the playbook no longer declares metadata.notify")
        if declared.credential is None:
            return str(declared.url), declared.secret
        credential = self.credentials().resolve(declared.credential)
        url = credential.get("url", "endpoint")
        if not url:
            raise NoetlError(f"credential '{declared.credential}' has no `url` field")
        secret = credential.get("secret", "signing_secret")
        return str(url), None if secret is None else str(secret)

    def deliver(self, note: NotificationRow) -> int:
        """POST one claimed row; 1 when delivered."""
        if note.target == TARGET_ENGINE and on_of(note.event) not in self.settings.on:
            reason = f"skipped: NOETL_NOTIFY_ON has no {on_of(note.event)}"
            self.store.notifications.skipped(note.notification_id, reason)
            return 0
        url = ""
        try:
            row = self.store.execution(note.execution_id)
            url, secret = self.target(note, row)
            body = json.dumps(payload(self.store, self.settings, note, row)).encode()
            headers = {"Content-Type": "application/json", ID_HEADER: note.notification_id}
            if secret:
                headers[SIGNATURE_HEADER] = sign(body, secret)
            answer = self.client().post(url, content=body, headers=headers)
            if not answer.is_success:
                raise NoetlError(f"the receiver answered HTTP {answer.status_code}")
        except Exception as exc:
            self._failed(note, exc, url)
            return 0
        self.store.notifications.delivered(note.notification_id)
        self.delivered += 1
        log.info("notification %s delivered", note.notification_id)
        return 1

    def _failed(self, note: NotificationRow, exc: Exception, url: str) -> None:
        text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        if url:  # an httpx error may quote the url: its path may be the secret (Slack)
            text = text.replace(url, shown_url(url))
        text = text[:ERROR_CHARS]
        wait = backoff_seconds(
            note.attempts + 1, self.settings.backoff_seconds, self.settings.backoff_max_seconds
        )
        self.store.notifications.failed(note.notification_id, text, wait)
        log.warning(
            "notification %s: delivery %d failed (%s); next try in %.0fs",
            note.notification_id,
            note.attempts + 1,
            text,
            wait,
        )

    def client(self) -> httpx.Client:
        if self._client is None:
            import httpx

            self._client = httpx.Client(timeout=POST_TIMEOUT_SECONDS, trust_env=False)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


class DelivererThread(Periodic):
    """`Deliverer.tick` every `interval` seconds; a failing look (the engine database
    away) is logged once a minute while it lasts."""

    def __init__(self, deliverer: Deliverer, interval: float = DELIVER_SECONDS) -> None:
        super().__init__(
            "noetl-notify",
            interval,
            deliverer.tick,
            log,
            "notify: a look at the notification outbox failed",
            60.0,
        )
        self.deliverer = deliverer
