"""The reaper's backstop: results stuck past their deadline marked `error`, their runs finalized
(after the liveness rules of portal/runs/reaper.py); one pass of it under a lock that spans every
process (portal/health/reaping.py runs the passes)."""

from __future__ import annotations

import fcntl
import hashlib
import logging
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import Q
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from portal.health import conf
from portal.runs.models import ACTIVE_STATUSES, CheckResult, Run, Scope, Status
from portal.runs.pairs import group_item_limits
from portal.runs.queues import run_queue
from portal.runs.reaper import reap_liveness, stop_orphans
from portal.runs.services import run_finalize
from worker.timeouts import node_task_limits

logger = logging.getLogger(__name__)


def _limits(snapshot: dict[str, Any], node_count: int) -> tuple[float, float]:
    """(node task hard limit, all group tasks' hard limits summed), as the worker enqueues them."""

    items = snapshot.get("items", [])
    connect = settings.KILN_SSH_CONNECT_TIMEOUT
    node_items = [i["timeout_s"] for i in items if i.get("scope", Scope.NODE) == Scope.NODE]
    _, node_hard = node_task_limits(command_budgets=node_items or [0], connect_timeout=connect)
    group_total = 0.0
    for item in items:
        if item.get("scope", Scope.NODE) == Scope.GROUP:
            group_total += group_item_limits(item=item, node_count=node_count)[1]
    return float(node_hard), group_total


def reap(*, now: datetime | None = None, orphans: bool = True) -> list[int]:
    """First the liveness rules (portal/runs/reaper.py: lapsed leases, lost messages, and with
    `orphans` the default queue's orphaned node-side processes); then, as a backstop, mark results
    stuck past their deadline as `error` (with the reason), then finalize their runs. Also
    finalizes active runs that have no active result left (a worker died between recording and
    finalizing). Returns the ids of the runs it touched.

    Deadlines (the same nested limits the worker enqueues with, worker/timeouts.py):
    - running node result: started_at + the node task's hard limit + KILN_REAPER_GRACE_S;
    - running group result: started_at + that group task's hard limit + grace;
    - queued result: run.created_at + KILN_REAPER_QUEUE_ALLOWANCE_S + node hard limit + every
      group hard limit + grace (a queue may be long; a group waits for the node checks).
    """
    now = now or timezone.now()
    by_lease = reap_liveness(now=now, orphans=orphans)
    grace = conf.reaper_grace_s()
    queue_allowance = conf.reaper_queue_allowance_s()
    active_runs = list(
        Run.objects.filter(status__in=ACTIVE_STATUSES).only("id", "plan_snapshot", "node_set", "created_at")
    )
    touched: set[int] = set()
    for run in active_runs:
        node_count = len(NodeSet(run.node_set or ""))
        node_hard, group_total = _limits(run.plan_snapshot, node_count)
        items = {i["key"]: i for i in run.plan_snapshot.get("items", [])}
        reaped = 0
        stuck_running = CheckResult.objects.filter(
            run=run, status=Status.RUNNING, scope=Scope.NODE, started_at__lt=now - timedelta(seconds=node_hard + grace)
        )
        reaped += stuck_running.update(
            status=Status.ERROR,
            reason=(
                f"reaped: still running {int(node_hard + grace)}s after it started (node task hard limit "
                f"{int(node_hard)}s + {int(grace)}s grace); its worker probably died"
            ),
            finished_at=now,
        )
        for result in CheckResult.objects.filter(run=run, status=Status.RUNNING, scope=Scope.GROUP).only(
            "id", "item_key", "started_at"
        ):
            item = items.get(result.item_key)
            if item is None:
                continue
            _, hard = group_item_limits(item=item, node_count=node_count)
            if result.started_at and result.started_at < now - timedelta(seconds=hard + grace):
                reaped += CheckResult.objects.filter(pk=result.pk, status=Status.RUNNING).update(
                    status=Status.ERROR,
                    reason=(
                        f"reaped: still running {int(hard + grace)}s after it started (group task hard limit "
                        f"{int(hard)}s + {int(grace)}s grace); its worker probably died"
                    ),
                    finished_at=now,
                )
        queue_deadline = run.created_at + timedelta(seconds=queue_allowance + node_hard + group_total + grace)
        if queue_deadline < now:
            reaped += CheckResult.objects.filter(run=run, status=Status.QUEUED).update(
                status=Status.ERROR,
                reason=(
                    f"reaped: still queued {int((now - run.created_at).total_seconds())}s after the run was created "
                    f"(allowance {int(queue_allowance)}s + the run's limits); no worker took it from queue "
                    f"{run_queue(run.plan_snapshot)}"
                ),
                finished_at=now,
            )
        stalled = not run.results.filter(Q(status__in=ACTIVE_STATUSES)).exists()
        if reaped or stalled or run.pk in by_lease:
            if reaped:
                logger.warning("reaper: run %s: %d result(s) marked error", run.pk, reaped)
            run_finalize(run_id=run.pk)
            touched.add(run.pk)
    return sorted(touched)


# The lock of the pass over every run, and the prefix of each queue's orphan-stopping lock.
REAPER_LOCK = "kiln-reaper"
# Releases the Redis lock only if this pass still holds it (its expiry may have handed it on).
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


@contextmanager
def reaper_lock(name: str) -> Iterator[bool]:
    """Yields whether this process holds the lock `name` (never waits); a killed holder never
    keeps it. With a Redis broker (production): a key that expires after one reaper interval,
    so a pass cut short by SIGKILL delays the next by at most that (a pass outliving it may meet
    another: harmless, every rule's update is conditional); Redis, not a PostgreSQL session lock,
    because workers may reach PostgreSQL through PgBouncer in transaction mode (docs/operations/workers-and-sizing.md).
    Embedded broker (one host): an flock in the data folder. Any other broker: a PostgreSQL
    session advisory lock."""
    from worker.celery import app

    url = str(app.conf.broker_url or "")
    if url.startswith(("redis://", "rediss://", "sentinel://")):
        with _redis_lock(app, name) as held:
            yield held
    elif url.startswith("filesystem://") or connection.vendor != "postgresql":
        with _file_lock(name) as held:
            yield held
    else:
        with _advisory_lock(name) as held:
            yield held


@contextmanager
def _redis_lock(app: Any, name: str) -> Iterator[bool]:
    key, token = f"kiln:lock:{name}", uuid.uuid4().hex
    try:
        with app.connection_for_write() as conn:
            held = bool(conn.default_channel.client.set(key, token, nx=True, px=conf.reaper_interval_s() * 1000))
    except Exception:  # the broker is away: this pass waits for it, the next one tries again
        logger.warning("reaper: could not take lock %s in the broker", name, exc_info=True)
        held = False
    try:
        yield held
    finally:
        if held:
            try:
                with app.connection_for_write() as conn:
                    conn.default_channel.client.eval(_RELEASE, 1, key, token)
            except Exception:  # it expires by itself
                logger.warning("reaper: could not release lock %s", name, exc_info=True)


@contextmanager
def _file_lock(name: str) -> Iterator[bool]:
    path = settings.DATA_DIR / f"reaper-{hashlib.sha256(name.encode()).hexdigest()[:16]}.lock"
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def _advisory_lock(name: str) -> Iterator[bool]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [name])
        row = cursor.fetchone()
    held = bool(row and row[0])
    try:
        yield held
    finally:
        if held:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [name])
            except DatabaseError:  # the connection is gone, and its session's lock with it
                logger.warning("reaper: could not release lock %s", name, exc_info=True)


def reaper_pass(*, queues: Iterable[str], now: datetime | None = None) -> list[int]:
    """One pass, from whichever process runs it (a worker's reaper thread, beat's, kiln.reap): the
    rules over every run if no other process is applying them now, then, for each of `queues`
    (those this process reaches the nodes of), the orphaned process groups of that queue's runs,
    one process per queue at a time. Returns the ids of the runs it touched ([] when another
    process held the lock)."""
    touched: list[int] = []
    with reaper_lock(REAPER_LOCK) as held:
        if held:
            touched = reap(now=now, orphans=False)
    for queue in sorted(set(queues)):
        with reaper_lock(f"{REAPER_LOCK}:{queue}") as held:
            if held:
                stop_orphans(now=now or timezone.now(), queue=queue)
    return touched


def reaper_schedule_remove() -> None:
    """Delete the PeriodicTask that sent kiln.reap through the queue before the reaper ran in its
    own threads: a task queued behind hours-long burn-ins reaped nothing until a slot freed, and
    piled up. Called at post_migrate."""

    PeriodicTask.objects.filter(name="kiln-reaper").delete()
