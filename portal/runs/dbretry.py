"""Writes that survive the database blinking: a lost connection is closed, and the write is tried
again on a fresh one after a short back-off.

Only idempotent writes go through here: recording a result is a claim-keyed conditional UPDATE (a
retry after a commit whose answer was lost finds the row finished and changes nothing), closing a
run takes its row lock and re-reads the state. A result that a node produced is then never turned
into `error` because PostgreSQL restarted, failed over, or a pooler dropped the connection.

When the database stays away longer than the retries last, the caller gets the exception: the
result is the portal's fault (`CheckResult.portal_fault`, see `portal_fault_reason`), never the
node's.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, Error, InterfaceError, OperationalError, connection

from worker.db import connect_checked

logger = logging.getLogger(__name__)
T = TypeVar("T")

# How long a write keeps retrying: the waits between its tries add up to at most RETRY_WINDOW_S,
# doubling from FIRST_DELAY_S up to MAX_DELAY_S (0.5 + 1 + 2 + 2 + ... : 15 tries in 30 s). A killed
# backend (pg_terminate_backend, a pooler dropping a client) is answered by the very next connect; a
# restart of PostgreSQL (fast shutdown, then a start with little WAL to replay) takes seconds; a
# database that drops connections again and again for a while (tests/faults/test_db_blink.py kills
# every backend twice a second) can kill a try mid-write several times in a row, so the retries are
# bounded by time, not by a small count. 30 s stays well inside the node task's slack for recording
# (KILN_TASK_SLACK_S, 60 s). A managed failover (AWS documents 60-120 s for RDS Multi-AZ) outlasts
# it: then the write fails, and the result is the portal's fault.
RETRY_WINDOW_S = 30.0
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 2.0
# What a lost or broken connection raises through Django (psycopg's OperationalError: "terminating
# connection due to administrator command", "server closed the connection unexpectedly", "could not
# connect"; InterfaceError: "connection already closed"). IntegrityError, DataError and
# ProgrammingError are bugs or bad data: a retry would only repeat them.
RETRYABLE: tuple[type[Error], ...] = (OperationalError, InterfaceError)


def db_retry(
    write: Callable[[int], T],
    *,
    what: str,
    window_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`write(attempt)` (1, 2, ...) until it returns, retrying across a lost database connection
    for as long as the waits between tries stay within `window_s` (RETRY_WINDOW_S).

    Inside an outer transaction nothing can be retried (the transaction is gone with the connection):
    the error is raised at once, for the outermost caller to handle."""
    window = RETRY_WINDOW_S if window_s is None else window_s
    delay, waited, attempt = FIRST_DELAY_S, 0.0, 0
    while True:
        attempt += 1
        try:
            return write(attempt)
        except RETRYABLE as exc:
            if waited + delay > window or connection.in_atomic_block:
                raise
            logger.warning(
                "%s: database connection lost (%s: %s); retry %d in %.1f s (%.1f of %.0f s waited)",
                what,
                type(exc).__name__,
                str(exc).strip().splitlines()[0] if str(exc).strip() else "",
                attempt,
                delay,
                waited,
                window,
            )
            with contextlib.suppress(DatabaseError):
                connection.close()  # the next query opens a fresh connection
            sleep(delay)
            waited += delay
            delay = min(delay * 2, MAX_DELAY_S)
            with contextlib.suppress(DatabaseError):
                connect_checked()  # the retry starts on a connection that answers, not a dead pooled one


def portal_fault_reason(exc: BaseException) -> str:
    """The reason of a result that Kiln failed to judge or record (CheckResult.portal_fault): it
    says that the portal failed, not the node."""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, DatabaseError):
        return f"Kiln could not record this result: database error ({type(exc).__name__}: {detail})"[:4000]
    return f"internal error in Kiln: {type(exc).__name__}: {detail}"[:4000]
