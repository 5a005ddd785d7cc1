"""Constants the query modules share: the command statuses an ended execution
cancels, and the statement that makes a commit durable on Postgres."""

from __future__ import annotations

from sqlalchemy import text

from noetl_celery.constants import CMD_DELAYED, CMD_ISSUED, CMD_PLANNED, CMD_RUNNING, CMD_WAITING

# a command parked by a parent waiting for its child execution
WAITING_FOR_CHILD = CMD_WAITING
SYNC_COMMIT = text("SET LOCAL synchronous_commit TO on")
# commands an ended execution cancels, and those of them that had started (a body in
# these: its row's work may be done, or half done)
UNFINISHED = (CMD_PLANNED, CMD_DELAYED, CMD_ISSUED, CMD_RUNNING, WAITING_FOR_CHILD)
STARTED = (CMD_RUNNING, WAITING_FOR_CHILD)
