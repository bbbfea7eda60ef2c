"""Database connections of worker threads: held only for short phases, never while a node is waited on.

A worker runs many node tasks at once on threads (CELERY_WORKER_POOL=threads, KILN_WORKER_CONCURRENCY,
portal/settings.py), and Django gives each thread its own connection. A node task spends seconds to
hours waiting on SSH and milliseconds on the database, so it does its database work in short
phases (`db_phase`: claim its checks, record one result, close the run) and closes its connection
at the end of each (on the threads pool, a close hands the connection back to the worker's
connection pool: `configure_worker_database`). At most KILN_WORKER_DB_CONNECTIONS threads of one
process are inside a phase at once; the others wait their turn (a phase takes milliseconds). One
worker process therefore holds at most that many PostgreSQL connections, whatever its concurrency:
the sizing rule of docs/operations/workers-and-sizing.md.

Any database use on a worker thread outside a phase (a heartbeat, a lease renewal, a cancel check)
borrows one of the pool's connections until that thread closes it: put such work in a phase of its
own (`with db_phase("heartbeat"): ...`) so it is gated and handed back at once, never kept by a
thread that then waits on a node.

`TaskLedger` is where a task's phases and its time on the network are added up, for the one line
per node task the worker logs (worker/celery.py): what Kiln itself costs per node, beside the time
the node's commands took.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, connections

if TYPE_CHECKING:
    from dj_database_url import DBConfig  # the type of one DATABASES entry (portal/settings.py)

_local = threading.local()
_gate_lock = threading.Lock()
_gates: dict[int, threading.BoundedSemaphore] = {}


def _gate(size: int) -> threading.BoundedSemaphore:
    size = max(1, int(size))
    with _gate_lock:
        gate = _gates.get(size)
        if gate is None:
            gate = _gates[size] = threading.BoundedSemaphore(size)
        return gate


logger = logging.getLogger(__name__)

WORKER_APPLICATION_NAME = "kiln-worker"
# Seconds a thread waits for one of the pool's connections before its phase fails: phases take
# milliseconds, so a minute means the database itself is stuck.
POOL_TIMEOUT_S = 60


def configure_worker_database(*, pool: str, db: DBConfig | None = None) -> None:
    """At worker start, before its threads connect (worker/celery.py, worker_init).

    PostgreSQL only. The worker's connections get the application_name `kiln-worker` (unless the
    DATABASE_URL names one), so pg_stat_activity and a pooler tell them from the web's: how
    operators and bench/bench_fanout.py count what workers hold. On the threads pool its threads
    share at most KILN_WORKER_DB_CONNECTIONS connections through a connection pool (psycopg_pool,
    Django's OPTIONS["pool"]): closing a connection at the end of a phase hands it back warm
    instead of tearing down a server process, which a fresh connection per phase would cost the
    database (a fork, authentication, cold catalog caches) several times per node. Not on prefork:
    a pool does not survive a fork."""
    if db is None:
        db = settings.DATABASES["default"]
        connections.close_all()  # nothing opened under the old options outlives the change
    if "postgresql" not in db.get("ENGINE", ""):
        return
    options = db.setdefault("OPTIONS", {})
    options.setdefault("application_name", WORKER_APPLICATION_NAME)
    if pool == "threads" and "pool" not in options:
        options["pool"] = {
            "min_size": 1,
            "max_size": max(1, settings.KILN_WORKER_DB_CONNECTIONS),
            "timeout": POOL_TIMEOUT_S,
        }
        db["CONN_MAX_AGE"] = 0  # Django's pool refuses persistent connections: the pool keeps them
        # Not the pool's own check at checkout: after each failed check psycopg_pool sleeps 1, 2,
        # 4, ... s (its reconnection back-off) before trying the next connection, inside the
        # caller's phase. With the server dropping connections repeatedly (tests/faults/
        # test_db_blink.py) every phase ended up asleep there holding the gate until the pool's
        # 60 s timeout. `connect_checked` checks at the start of each phase instead, with no sleep.
        db["CONN_HEALTH_CHECKS"] = False


# Connections `connect_checked` tries before it gives up: every connection a pool of the default
# size can hold, all dropped at once by a server restart, plus the fresh one that replaces them.
CHECKED_CONNECT_TRIES = 6


def connect_checked() -> None:
    """Open this thread's connection and make sure the server still answers on it (one empty
    round trip). A connection the server dropped while it waited in the pool (a restart, a failover,
    pg_terminate_backend) is handed back, the pool is told to check every idle one it holds, and
    the next is tried at once: a phase starts on a live connection instead of failing its first
    query. Inside a transaction nothing is swapped (the caller's transaction is on it)."""
    if connection.in_atomic_block:
        return
    for _ in range(CHECKED_CONNECT_TRIES - 1):
        try:
            connection.ensure_connection()
            if connection.is_usable():
                return
        except (OperationalError, InterfaceError) as exc:  # dropped while it was being handed out
            logger.info("database connection unusable at checkout (%s); trying another", exc)
        try:
            connection.close()  # back to the pool, which discards it and opens a replacement
        except (OperationalError, InterfaceError):
            connection.connection = None  # already gone: nothing to hand back
        pool = getattr(connection, "pool", None)
        if pool is not None:
            pool.check()  # the other idle connections died with it: replace them now, not one per try
    connection.ensure_connection()


def release_connection() -> None:
    """Close this thread's database connection, unless it is inside a transaction (a caller's
    `transaction.atomic`, a test's): closing there would end the caller's transaction under it."""
    if connection.in_atomic_block:
        return
    connection.close()


@dataclass
class _Part:
    seconds: float = 0.0
    count: int = 0
    queries: int = 0


@dataclass
class TaskLedger:
    """What one task spent, by part: database phases (with their queries) and timed network steps."""

    name: str
    started: float = field(default_factory=time.monotonic)
    parts: dict[str, _Part] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def add(self, label: str, seconds: float, queries: int = 0) -> None:
        part = self.parts.setdefault(label, _Part())
        part.seconds += seconds
        part.count += 1
        part.queries += queries

    def line(self) -> str:
        """`NAME 1.234s: db_wait 0.002s x9, claim 0.012s 5q, connect 0.061s, commands 9.1s, record 0.063s 70q x7`"""
        shown = []
        for label, part in self.parts.items():
            text = f"{label} {part.seconds:.3f}s"
            if part.queries:
                text += f" {part.queries}q"
            if part.count > 1:
                text += f" x{part.count}"
            shown.append(text)
        shown += [f"{key}={value}" for key, value in self.notes.items()]
        return f"{self.name} {time.monotonic() - self.started:.3f}s: " + ", ".join(shown)


def ledger() -> TaskLedger | None:
    """The ledger of the task running on this thread, if one is open."""
    stack = getattr(_local, "ledgers", None)
    return stack[-1] if stack else None


def ledger_open(name: str) -> TaskLedger:
    """Open a ledger for the task about to run on this thread (worker/celery.py's task signals).
    Ledgers stack: an eager task run inside another task has its own."""
    book = TaskLedger(name=name)
    if not hasattr(_local, "ledgers"):
        _local.ledgers = []
    _local.ledgers.append(book)
    return book


def ledger_close() -> TaskLedger | None:
    """Close this thread's innermost ledger and return it."""
    stack = getattr(_local, "ledgers", None)
    return stack.pop() if stack else None


@contextmanager
def timed(label: str) -> Iterator[None]:
    """Add the time spent in the block to this thread's ledger under `label` (no-op without one)."""
    started = time.monotonic()
    try:
        yield
    finally:
        book = ledger()
        if book is not None:
            book.add(label, time.monotonic() - started)


@contextmanager
def db_phase(label: str = "database") -> Iterator[None]:
    """A short stretch of database work; the thread's connection is closed when it ends.

    At most KILN_WORKER_DB_CONNECTIONS threads of this process are inside one at once. Re-entrant:
    a phase inside a phase of the same thread neither waits again nor closes early. Never wait on a
    node inside one (that is the point): run the commands between phases."""
    if getattr(_local, "depth", 0):
        _local.depth += 1
        try:
            yield
        finally:
            _local.depth -= 1
        return
    gate = _gate(settings.KILN_WORKER_DB_CONNECTIONS)
    waiting = time.monotonic()
    with gate:
        book = ledger()
        if book is not None:  # the turn this thread waited for one of the process's connections
            book.add("db_wait", time.monotonic() - waiting)
        _local.depth = 1
        started = time.monotonic()
        queries = [0]

        def count(execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
            queries[0] += 1
            return execute(sql, params, many, context)

        try:
            with connection.execute_wrapper(count):
                connect_checked()
                yield
        finally:
            _local.depth = 0
            try:
                release_connection()
            finally:
                book = ledger()
                if book is not None:
                    book.add(label, time.monotonic() - started, queries[0])
