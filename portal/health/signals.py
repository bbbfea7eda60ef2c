"""The one hook into runs: when a run is saved finished, judge its nodes' health (on commit)."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

logger = logging.getLogger(__name__)


def run_saved(sender: Any, instance: Any, created: bool, update_fields: Any = None, **kwargs: Any) -> None:
    """post_save of runs.Run. run_finalize saves status + finished_at once, when the run closes."""
    from portal.runs.models import ACTIVE_STATUSES

    if created or instance.status in ACTIVE_STATUSES or instance.finished_at is None:
        return
    if update_fields is not None and "status" not in update_fields:
        return
    run_id = instance.pk
    transaction.on_commit(lambda: _evaluate(run_id))


def _evaluate(run_id: int) -> None:
    from portal.health.services import health_evaluate_run, risks_refresh, run_metrics_refresh
    from portal.runs.dbretry import db_retry

    try:
        health_evaluate_run(run_id=run_id)
    except Exception:
        # Health is a consumer of runs: its bug must never make a finished run look unfinished.
        logger.exception("health evaluation of run %s failed", run_id)
    try:  # after the states: the nodes' NodeHealth rows exist by now
        db_retry(lambda _: risks_refresh(run_id=run_id), what=f"trends of the nodes of run {run_id}")
    except Exception:
        logger.exception("trends of run %s failed", run_id)
    try:
        db_retry(lambda _: run_metrics_refresh(run_id=run_id), what=f"/metrics of the nodes of run {run_id}")
    except Exception:
        logger.exception("/metrics of run %s failed", run_id)


def migrated(sender: Any, **kwargs: Any) -> None:
    from portal.health.services import node_metrics_backfill, reaper_schedule_ensure

    reaper_schedule_ensure()
    node_metrics_backfill()
