"""Writes of the health app, one module per idea: node health from finished runs (state), alerts,
scheduler hooks (scheduler) and schedules (django-celery-beat). Keyword-only,
typed. Callers import from here; the names below are the app's service API."""

from __future__ import annotations

from portal.health.services.alerts import (
    alert_attempt,
    alert_payload,
    alert_retry_delay_s,
    alert_wanted,
    alerts_create,
    slack_body,
)
from portal.health.services.exported import (
    cluster_metrics_refresh,
    node_metrics_backfill,
    node_metrics_refresh,
    run_metrics_refresh,
)
from portal.health.services.risks import risks_refresh
from portal.health.services.scheduler import (
    GIVE_ACTIONS,
    TAKE_ACTIONS,
    hooks_plan,
    scheduler_action_execute,
    scheduler_action_retry_delay_s,
)
from portal.health.services.schedules import (
    ScheduleError,
    crontab_parse,
    schedule_create,
    schedule_delete,
    schedule_set_enabled,
    schedule_update,
    scheduled_run_fire,
)
from portal.health.services.state import Judged, health_evaluate_run, state_from_results
from portal.health.services.workers import worker_beat_forget, worker_beat_record

__all__ = [
    "GIVE_ACTIONS",
    "TAKE_ACTIONS",
    "Judged",
    "ScheduleError",
    "alert_attempt",
    "alert_payload",
    "alert_retry_delay_s",
    "alert_wanted",
    "alerts_create",
    "crontab_parse",
    "health_evaluate_run",
    "risks_refresh",
    "hooks_plan",
    "cluster_metrics_refresh",
    "node_metrics_backfill",
    "node_metrics_refresh",
    "run_metrics_refresh",
    "schedule_create",
    "schedule_delete",
    "schedule_set_enabled",
    "schedule_update",
    "scheduled_run_fire",
    "scheduler_action_execute",
    "scheduler_action_retry_delay_s",
    "slack_body",
    "state_from_results",
    "worker_beat_forget",
    "worker_beat_record",
]
