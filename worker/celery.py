"""The Celery app. Configuration comes from Django settings (CELERY_* names).

`celery -A worker worker` with no flags runs the settings' pool and concurrency: a threads pool of
KILN_WORKER_CONCURRENCY (256) node tasks per process (portal/settings.py says why). Each task's
thread closes its database connection when the task ends, and node tasks log one line with what
Kiln itself spent on the node (worker/db.py).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

logger = logging.getLogger("kiln.worker")

# The signal handlers below import worker.db and Django's settings when they run: this module is
# the app every process loads first (`celery -A worker`), before Django's settings are set up.

app = Celery("kiln")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,  # long tasks: do not hoard messages a sibling worker could run
    task_track_started=True,
    broker_connection_retry_on_startup=True,
)
# Each app's tasks.py, once Django is set up (Celery's Django fix-up runs django.setup() first): the
# task modules import models at the top. The portal registers the run tasks in ExecutionConfig.ready().
app.autodiscover_tasks(
    ["portal.runs", "portal.execution", "portal.health", "portal.certificates"], related_name="tasks"
)

# Pools that run a task on a thread or greenlet of the worker process: Celery cannot interrupt
# those, so it ignores soft and hard time limits there (it says nothing; we do, at start).
UNLIMITED_POOLS = ("threads", "gevent", "eventlet", "solo")


def pool_name(pool: Any) -> str:
    """`threads`, `prefork`... for a worker's pool class or the configured name."""
    if isinstance(pool, str):
        return pool
    module = getattr(pool, "__module__", "") or type(pool).__module__
    return {
        "celery.concurrency.thread": "threads",
        "celery.concurrency.prefork": "prefork",
        "celery.concurrency.solo": "solo",
        "celery.concurrency.gevent": "gevent",
        "celery.concurrency.eventlet": "eventlet",
    }.get(module, module)


def startup_line(*, pool: str, concurrency: int, db_connections: int) -> str:
    """What the worker says about its pool when it is ready (and what bounds its tasks)."""
    if pool == "prefork":
        connections = f"at most {concurrency} database connections (one per child process)"
    else:
        connections = f"at most {db_connections} database connections (KILN_WORKER_DB_CONNECTIONS)"
    line = f"Kiln worker: {pool} pool, {concurrency} tasks at once, {connections}"
    if pool in UNLIMITED_POOLS:
        line += (
            "; Celery time limits are not enforced by this pool: a node task is bounded by its commands' "
            "remote `timeout`, the SSH channel backstop and the connect timeout (worker/timeouts.py), "
            "and the reaper closes what outlives its deadline"
        )
    return line


@worker_init.connect
def _configure_database(sender: Any = None, **_: Any) -> None:
    from worker.db import configure_worker_database

    configure_worker_database(pool=pool_name(getattr(sender, "pool_cls", None) or app.conf.worker_pool))


@worker_ready.connect
def _say_pool(sender: Any = None, **_: Any) -> None:
    from django.conf import settings

    consumer = sender
    pool = getattr(getattr(consumer, "controller", None), "pool_cls", None) or app.conf.worker_pool
    concurrency = getattr(getattr(consumer, "controller", None), "concurrency", None) or app.conf.worker_concurrency
    logger.info(
        startup_line(
            pool=pool_name(pool), concurrency=int(concurrency), db_connections=settings.KILN_WORKER_DB_CONNECTIONS
        )
    )


@task_prerun.connect
def _open_ledger(task: Any = None, task_id: str | None = None, args: Any = None, **_: Any) -> None:
    from worker.db import ledger_open

    ledger_open(f"{getattr(task, 'name', 'task')}{tuple(args or ())}")


@task_postrun.connect
def _close_task(task: Any = None, **_: Any) -> None:
    """After every task, on its thread: log what Kiln spent (node tasks), and close the thread's
    database connection (back to the pool): an idle thread of a 64-thread pool holds none between
    tasks. Celery's Django fixup closes it too; this does not depend on the fixup."""
    from worker.db import ledger_close, release_connection

    book = ledger_close()
    if book is not None and book.parts:
        logger.info("kiln task %s", book.line())
    if not getattr(getattr(task, "request", None), "is_eager", False):
        release_connection()
