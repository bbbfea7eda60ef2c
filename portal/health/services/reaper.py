"""The reaper's backstop: results stuck past their deadline marked `error`, their runs finalized
(after the liveness rules of portal/runs/reaper.py), and its PeriodicTask."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from portal.health import conf
from portal.runs.models import ACTIVE_STATUSES, CheckResult, Run, Scope, Status
from portal.runs.pairs import group_item_limits
from portal.runs.queues import run_queue
from portal.runs.reaper import reap_liveness
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


def reap(*, now: datetime | None = None) -> list[int]:
    """First the liveness rules (portal/runs/reaper.py: lapsed leases, lost messages, orphaned
    node-side processes); then, as a backstop, mark results stuck past their deadline as `error`
    (with the reason), then finalize their runs. Also finalizes active runs that have no active
    result left (a worker died between recording and finalizing). Returns the ids of the runs it
    touched.

    Deadlines (the same nested limits the worker enqueues with, worker/timeouts.py):
    - running node result: started_at + the node task's hard limit + KILN_REAPER_GRACE_S;
    - running group result: started_at + that group task's hard limit + grace;
    - queued result: run.created_at + KILN_REAPER_QUEUE_ALLOWANCE_S + node hard limit + every
      group hard limit + grace (a queue may be long; a group waits for the node checks).
    """
    now = now or timezone.now()
    by_lease = reap_liveness(now=now)
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


def reaper_schedule_ensure() -> None:
    """The reaper's PeriodicTask (every KILN_REAPER_INTERVAL_S). Called at post_migrate."""

    every, _ = IntervalSchedule.objects.get_or_create(every=conf.reaper_interval_s(), period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.update_or_create(
        name="kiln-reaper",
        defaults={
            "task": "kiln.reap",
            "interval": every,
            "crontab": None,
            "enabled": True,
            "description": (
                "Acts on lapsed leases (worker lost: re-enqueue or error), re-sends lost messages, stops "
                "orphaned node-side processes; marks results stuck past their deadline as error; finalizes runs."
            ),
        },
    )
