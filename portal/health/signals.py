"""The one hook into runs: when a run is saved finished, judge its nodes' health (on commit)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction

logger = logging.getLogger(__name__)

RUN_CLOSED = "kiln.run_closed"  # the task's name: a contract with messages in flight

# Steps of other apps that follow a run's close, after health's own, as (what, step(run_id=...)):
# an app above health adds its step in its ready() (history: the run's key values).
AFTER_CLOSE_STEPS: list[tuple[str, Callable[..., object]]] = []


def run_saved(sender: Any, instance: Any, created: bool, update_fields: Any = None, **kwargs: Any) -> None:
    """post_save of runs.Run. run_finalize saves status + finished_at once, when the run closes."""
    from portal.runs.models import ACTIVE_STATUSES

    if created or instance.status in ACTIVE_STATUSES or instance.finished_at is None:
        return
    if update_fields is not None and "status" not in update_fields:
        return
    run_id = instance.pk
    transaction.on_commit(lambda: after_close(run_id))


def after_close(run_id: int) -> None:
    """Inside a worker's task (the run's last node or group task closed it), the steps go to a task
    of their own (kiln.run_closed): at 12,500 nodes they take minutes, which must not count against
    the closing task's time limit (sized for its checks). Elsewhere (a web request, a command, the
    unit tests) they run here. If the broker refuses the task, they run here too: never lost."""
    from celery import current_task

    if not current_task or current_task.request.is_eager or current_task.request.called_directly:
        evaluate(run_id)
        return
    from worker.celery import app

    try:
        # By name: the task calls back into this module.
        app.signature(RUN_CLOSED).apply_async(args=(run_id,))
    except Exception:
        logger.exception("could not send the after-close task of run %s: running it in this task", run_id)
        evaluate(run_id)


def evaluate(run_id: int) -> None:
    """What follows a run's close, each step on its own: node states first (trends read them), then
    trends, the nodes' /metrics lines, and the run's key values folded for comparisons (history's,
    run at the same moment). A step's failure is logged and never makes the run look unfinished."""
    from portal.health.services import health_evaluate_run, risks_refresh, run_metrics_refresh
    from portal.runs.dbretry import db_retry

    try:
        health_evaluate_run(run_id=run_id)
    except Exception:
        logger.exception("health evaluation of run %s failed", run_id)
    steps: list[tuple[str, Callable[..., object]]] = [
        ("trends of the nodes", risks_refresh),
        ("/metrics of the nodes", run_metrics_refresh),
        *AFTER_CLOSE_STEPS,
    ]
    for what, step in steps:
        try:
            db_retry(functools.partial(_step, step, run_id), what=f"{what} of run {run_id}")
        except Exception:
            logger.exception("%s of run %s failed", what, run_id)


def _step(step: Callable[..., object], run_id: int, attempt: int) -> object:
    return step(run_id=run_id)


def migrated(sender: Any, **kwargs: Any) -> None:
    from portal.execution.reaper import reaper_schedule_remove
    from portal.health.services import node_metrics_backfill

    reaper_schedule_remove()
    node_metrics_backfill()
