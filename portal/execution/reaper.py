"""The reaper's liveness rules: it acts on leases, not deadlines. A reaper thread in every worker
process and one in celery beat run them every KILN_REAPER_INTERVAL_S (portal/execution/reaping.py),
outside any pool slot, one process at a time (a lock), before the deadline backstop.

1. A running result whose lease has lapsed lost its worker. If its check had not started a command
   on the node, it goes back to the queue and its task is sent again (another worker takes it);
   if it had, it is `error` ("worker lost: WORKER, last heartbeat T", portal_fault: the node is not
   to blame), never run twice behind anyone's back.
2. A queued result whose message is overdue (KILN_LOST_MESSAGE_S after it was sent) and that the
   broker no longer holds is sent again (portal/execution/broker.py), to the run's queue. When no live
   worker consumes that queue (a site's worker is down, or the cluster names a queue nobody
   serves), the run's log says so once: the checks wait for one, nothing else runs them.
3. A result whose lease has lapsed with a process group still recorded (its worker died, or its
   connection broke mid-command) has that group stopped over a new connection, until its own
   remote timeout would have ended it anyway. Only a process that reaches the node can: each
   worker's reaper thread stops those of the queues it consumes, beat's those of the default
   queue. A site whose every worker is gone keeps its orphans until their own remote `timeout`
   ends them (rules 1 and 2 still close its runs: they need only the database).
Each action is a line in the run's log (RunEvent).

Then the backstop: results stuck past their deadline are marked `error` and their runs finalized
(reap). One pass of both runs under a lock that spans every process (reaper_pass, the one entry
point the reaper threads of portal/execution/reaping.py call).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Q
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from portal.execution import broker
from portal.execution.execution import node_target
from portal.execution.groups import group_members
from portal.runs import dispatch, events, leases, queues
from portal.runs.models import ACTIVE_STATUSES, CheckResult, Run, RunEvent, Scope, Status
from portal.runs.pairs import group_item_limits
from portal.runs.queues import run_queue
from portal.runs.services import run_finalize
from worker.procgroup import stop_group, tag_for
from worker.ssh import CHANNEL_SLACK_S, REMOTE_KILL_GRACE_S, TransportError, open_transport
from worker.timeouts import node_task_limits

logger = logging.getLogger(__name__)

# Claims of one result after which a lost worker's check is `error` instead of queued again
# (leases.MAX_CLAIMS: a check that kills its worker must not take down worker after worker).
MAX_ATTEMPTS = leases.MAX_CLAIMS
# Nodes stopped at once: each stop is one SSH connect (~60 ms) and a few seconds at most.
STOP_PARALLELISM = 16


def reaper_interval_s() -> int:
    """KILN_REAPER_INTERVAL_S: how often each reaper thread runs a pass (portal/settings.py)."""
    return max(5, int(settings.KILN_REAPER_INTERVAL_S))


def reaper_grace_s() -> float:
    """KILN_REAPER_GRACE_S: extra seconds past a result's hard time limit before it is reaped."""
    return float(settings.KILN_REAPER_GRACE_S)


def reaper_queue_allowance_s() -> float:
    """KILN_REAPER_QUEUE_ALLOWANCE_S: how long a result may wait `queued` on top of its run's limits."""
    return float(settings.KILN_REAPER_QUEUE_ALLOWANCE_S)


def _when(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "never"


def reap_liveness(*, now: datetime | None = None, orphans: bool = True) -> set[int]:
    """Apply rules 1 and 2, and with `orphans` rule 3 for the default queue; returns the ids of
    the runs whose results it changed."""
    now = now or timezone.now()
    touched = reap_lapsed(now=now)
    touched |= requeue_lost(now=now)
    if orphans:
        stop_orphans(now=now)
    return touched


def reap_lapsed(*, now: datetime) -> set[int]:
    rows = list(
        CheckResult.objects.filter(status=Status.RUNNING, lease_expires_at__lt=now)
        .select_related("node")
        .only(
            "id", "run", "node", "node__hostname", "scope", "item_key", "claimed_by", "attempt", "worker_name",
            "heartbeat_at", "lease_expires_at", "command_started_at",
        )
    )  # fmt: skip
    holders: dict[tuple[int, int, str, str], list[CheckResult]] = defaultdict(list)
    for row in rows:
        holders[(row.run_id, row.node_id, row.scope, row.claimed_by)].append(row)
    touched: set[int] = set()
    for (run_id, node_id, scope, _), held in holders.items():
        with transaction.atomic():
            if _reap_holder(run_id=run_id, node_id=node_id, scope=scope, held=held, now=now):
                touched.add(run_id)
    return touched


def _reap_holder(*, run_id: int, node_id: int, scope: str, held: list[CheckResult], now: datetime) -> bool:
    first = held[0]
    host = first.node.hostname
    worker = first.worker_name or "an unnamed worker"
    lost = f"worker lost: {worker}, last heartbeat {_when(first.heartbeat_at)}"
    lapsed = {"status": Status.RUNNING, "lease_expires_at__lt": now}
    fresh = [r for r in held if r.command_started_at is None and r.attempt < MAX_ATTEMPTS]
    started = [r for r in held if r not in fresh]
    changed = False
    if started:
        why = lost if all(r.command_started_at for r in started) else f"{lost}; not retried after {MAX_ATTEMPTS} claims"
        errored = CheckResult.objects.filter(pk__in=[r.pk for r in started], **lapsed).update(
            status=Status.ERROR, reason=why, portal_fault=True, finished_at=now
        )
        if errored:
            changed = True
            events.run_event_add(
                run_id=run_id,
                kind=events.WORKER_LOST,
                message=f"{host}: {', '.join(r.item_key for r in started)} marked error ({why})",
            )
    if fresh:
        requeued = CheckResult.objects.filter(pk__in=[r.pk for r in fresh], **lapsed).update(
            status=Status.QUEUED,
            claimed_by="dispatched" if scope == Scope.GROUP else "",
            lease_expires_at=leases.queued_lease(now),
            heartbeat_at=None,
            started_at=None,
        )
        if requeued:
            changed = True
            events.run_event_add(
                run_id=run_id,
                kind=events.REENQUEUED,
                message=(
                    f"{host}: {', '.join(r.item_key for r in fresh)} had not started when its worker was lost "
                    f"({worker}, last heartbeat {_when(first.heartbeat_at)}); sent to another worker"
                ),
            )
            _send_again(run_id=run_id, node_id=node_id, scope=scope, result_ids=[r.pk for r in fresh])
    return changed


def _send_again(*, run_id: int, node_id: int, scope: str, result_ids: list[int]) -> None:
    if scope == Scope.GROUP:
        for result_id in result_ids:
            transaction.on_commit(partial(dispatch.enqueue_group, run_id=run_id, result_id=result_id))
    else:
        transaction.on_commit(lambda: dispatch.enqueue_node(run_id=run_id, node_id=node_id))


def requeue_lost(*, now: datetime) -> set[int]:
    overdue = list(
        CheckResult.objects.filter(status=Status.QUEUED, lease_expires_at__lt=now)
        .exclude(scope=Scope.GROUP, claimed_by="")  # a group check not dispatched yet waits on its run
        .values_list("pk", "run_id", "node_id", "node__hostname", "scope", "lease_expires_at")
    )
    if not overdue:
        return set()
    allowance = leases.lost_message_s()
    run_queues = _run_queues({row[1] for row in overdue})
    pending = broker.pending_tasks(max_age_s=allowance, queues=set(run_queues.values()))
    _report_unserved(overdue, run_queues)
    tasks: dict[broker.TaskKey, list[tuple[Any, ...]]] = defaultdict(list)
    for row in overdue:
        pk, run_id, node_id, _, scope, _ = row
        key = (dispatch.RUN_GROUP, (run_id, pk)) if scope == Scope.GROUP else (dispatch.RUN_NODE, (run_id, node_id))
        tasks[key].append(row)
    waiting = [row[0] for key, rows in tasks.items() if pending is not None and key in pending for row in rows]
    for start in range(0, len(waiting), 1000):  # still in the broker: a long queue, not a lost message
        CheckResult.objects.filter(pk__in=waiting[start : start + 1000], status=Status.QUEUED).update(
            lease_expires_at=leases.queued_lease(now)
        )
    where = "in the broker" if pending is not None else "that Kiln could see (the broker cannot be inspected)"
    touched: set[int] = set()
    for key, rows in tasks.items():
        if pending is not None and key in pending:
            continue
        _, run_id, node_id, host, scope, lease = rows[0]
        waited = (now - lease).total_seconds() + allowance
        with transaction.atomic():
            sent = CheckResult.objects.filter(
                pk__in=[row[0] for row in rows], status=Status.QUEUED, lease_expires_at__lt=now
            ).update(lease_expires_at=leases.queued_lease(now))
            if not sent:
                continue  # claimed meanwhile, or another reaper got there first
            what = "its multi-node check" if scope == Scope.GROUP else f"its {sent} queued check(s)"
            events.run_event_add(
                run_id=run_id,
                kind=events.REENQUEUED,
                message=f"{host}: {what} waited {waited:.0f} s with no task {where}; sent again",
            )
            _send_again(run_id=run_id, node_id=node_id, scope=scope, result_ids=[row[0] for row in rows])
        touched.add(run_id)
    return touched


def _run_queues(run_ids: set[int]) -> dict[int, str]:
    snapshots = Run.objects.filter(pk__in=run_ids).values_list("pk", "plan_snapshot")
    return {pk: queues.run_queue(snapshot) for pk, snapshot in snapshots}


def _report_unserved(overdue: list[tuple[Any, ...]], run_queues: dict[int, str]) -> None:
    """Say once in each run's log when the queue its overdue checks wait in has no live worker."""
    served = queues.served_queues()
    if served is None:
        return  # could not ask: say nothing rather than something false
    waiting: dict[int, int] = defaultdict(int)
    for row in overdue:
        waiting[row[1]] += 1
    for run_id, count in waiting.items():
        queue = run_queues.get(run_id, queues.default_queue())
        if queue in served:
            continue
        marker = f"no worker is serving queue {queue}"
        if RunEvent.objects.filter(run_id=run_id, kind=events.NO_WORKER, message__startswith=marker).exists():
            continue
        events.run_event_add(
            run_id=run_id,
            kind=events.NO_WORKER,
            message=f"{marker}: {count} check(s) wait for one (start `celery -A worker worker -Q {queue}` "
            "where the cluster's nodes can be reached, or cancel the run); nothing else runs them",
        )


def stop_orphans(*, now: datetime, queue: str | None = None) -> int:
    """Stop the process groups left on nodes by results whose lease lapsed, of the runs on `queue`
    (those this worker reaches; the default queue when None). Returns how many."""
    queue = queue or queues.default_queue()
    rows = [
        row
        for row in CheckResult.objects.filter(remote_pgid__isnull=False, lease_expires_at__lt=now).select_related(
            "node__cluster", "run"
        )
        if queues.run_queue(row.run.plan_snapshot) == queue
    ]
    if not rows:
        return 0
    live: list[CheckResult] = []
    expired: list[CheckResult] = []
    for row in rows:
        (live if _may_still_run(row, now) else expired).append(row)
    for row in expired:  # its own remote timeout has ended it by now
        CheckResult.objects.filter(pk=row.pk, remote_pgid=row.remote_pgid).update(remote_pgid=None)
    by_host: dict[int, tuple[Any, list[CheckResult]]] = {}
    for row in live:
        host = _host_of(row)
        by_host.setdefault(host.pk, (host, []))[1].append(row)
    if not by_host:
        return 0
    with ThreadPoolExecutor(max_workers=min(STOP_PARALLELISM, len(by_host)), thread_name_prefix="kiln-reap") as pool:
        outcomes = list(pool.map(lambda item: _stop_on(*item), by_host.values()))
    stopped = 0
    for (host, host_rows), outcome in zip(by_host.values(), outcomes, strict=True):
        for row in host_rows:
            result = outcome.get(row.pk)
            if isinstance(result, str):
                if result != "survived":
                    CheckResult.objects.filter(pk=row.pk, remote_pgid=row.remote_pgid).update(remote_pgid=None)
                if result in ("stopped", "killed", "survived"):
                    stopped += 1
                    how = {"stopped": "ended on SIGTERM", "killed": "needed SIGKILL"}.get(
                        result, "was still there after SIGKILL"
                    )
                    events.run_event_add(
                        run_id=row.run_id,
                        kind=events.PROCESSES_STOPPED if result != "survived" else events.STOP_FAILED,
                        message=f"{row.item_key} on {host.hostname} ({row.status}, lease lapsed): process group "
                        f"{row.remote_pgid} {how}; stopped over a new connection by the reaper",
                    )
            else:
                _report_stop_failure(row, host.hostname, str(result))
    return stopped


def _may_still_run(row: CheckResult, now: datetime) -> bool:
    """Whether the command can still be running: its check's budget, with the remote timeout's kill
    grace and the channel slack, has not passed since its first command started."""
    started = row.command_started_at or row.started_at
    if started is None:
        return True
    item = next((i for i in row.run.plan_snapshot.get("items", []) if i["key"] == row.item_key), None)
    budget = float(item["timeout_s"]) if item else 0.0
    return started + timedelta(seconds=budget + REMOTE_KILL_GRACE_S + CHANNEL_SLACK_S) > now


def _host_of(row: CheckResult) -> Any:
    """Where the process group runs: the node, or for a multi-node check its launcher (the first
    node whose per-node checks did not error, as execute_group chose it)."""
    if row.scope != Scope.GROUP:
        return row.node
    members, _ = group_members(row.run)
    return members[0] if members else row.node


def _stop_on(host: Any, rows: list[CheckResult]) -> dict[int, str | Exception]:
    """One new connection to `host`; every row's group stopped on it. No database access here."""
    try:
        transport = open_transport(node_target(host))
    except TransportError as exc:
        return {row.pk: exc for row in rows}
    outcome: dict[int, str | Exception] = {}
    try:
        for row in rows:
            if row.remote_pgid is None:  # stop_orphans selects rows with a pgid; narrows the type
                continue
            try:
                outcome[row.pk] = stop_group(
                    transport, pgid=row.remote_pgid, tag=tag_for(row.pk, row.attempt), grace_s=REMOTE_KILL_GRACE_S
                )
            except (TransportError, RuntimeError) as exc:
                outcome[row.pk] = exc
    finally:
        transport.close()
    return outcome


def _report_stop_failure(row: CheckResult, hostname: str, why: str) -> None:
    """Logged every round; written to the run's log once per result (the reaper retries each round)."""
    logger.warning("reaper: could not stop result %s on %s: %s", row.pk, hostname, why)
    marker = f"(result #{row.pk})"
    if RunEvent.objects.filter(run_id=row.run_id, kind=events.STOP_FAILED, message__contains=marker).exists():
        return
    events.run_event_add(
        run_id=row.run_id,
        kind=events.STOP_FAILED,
        message=f"{row.item_key} on {hostname} {marker}: could not stop process group {row.remote_pgid} yet: "
        f"{why}; the reaper keeps trying until its own time limit ends it",
    )


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
    """First the liveness rules (portal/execution/reaper.py: lapsed leases, lost messages, and with
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
    grace = reaper_grace_s()
    queue_allowance = reaper_queue_allowance_s()
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
            held = bool(conn.default_channel.client.set(key, token, nx=True, px=reaper_interval_s() * 1000))
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
