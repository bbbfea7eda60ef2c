"""Celery tasks of the health app (discovered by worker/celery.py). Thin: they call services.

The services queue these tasks (portal/health/services/state.py), so each task imports the
service it calls when it runs: importing them here would close a loop within the app."""

from __future__ import annotations

import logging

from worker.decorators import kiln_task

logger = logging.getLogger(__name__)

# What follows a run's close at 12,500 nodes is minutes of work (bench/bench_history.py "after
# closing"): an hour bounds a stuck step without cutting a real one short; below the broker's
# visibility timeout (25 h) so the message is not redelivered while it runs.
AFTER_CLOSE_SOFT_S = 3600


@kiln_task(name="kiln.scheduled_run")
def scheduled_run(self, schedule_id: int) -> int | None:
    """Fired by celery beat (DatabaseScheduler) for a Schedule: start its run once per firing."""
    from portal.health.services import scheduled_run_fire

    run = scheduled_run_fire(schedule_id=schedule_id, task_id=self.request.id or "")
    return run.pk if run else None


@kiln_task(name="kiln.health_evaluate")
def health_evaluate(self, run_id: int) -> int:
    from portal.health.services import health_evaluate_run

    return len(health_evaluate_run(run_id=run_id))


@kiln_task(name="kiln.run_closed", soft_time_limit=AFTER_CLOSE_SOFT_S, time_limit=AFTER_CLOSE_SOFT_S + 60)
def run_closed(self, run_id: int) -> None:
    """After a run closed in a worker (portal/health/signals.py after_close): node health, trends,
    /metrics lines, key values. Idempotent: each step recomputes from the run's results."""
    from portal.health.signals import evaluate

    evaluate(run_id)


@kiln_task(name="kiln.alert_deliver", max_retries=None)
def alert_deliver(self, delivery_id: int) -> str:
    """Send one alert; on failure retry with exponential backoff until KILN_ALERT_MAX_ATTEMPTS."""
    from portal.health.models import AlertDelivery, DeliveryStatus
    from portal.health.services import alert_attempt, alert_retry_delay_s

    delivery = AlertDelivery.objects.filter(pk=delivery_id).first()
    if delivery is None or delivery.status in (DeliveryStatus.SENT, DeliveryStatus.FAILED):
        return delivery.status if delivery else "gone"
    error = alert_attempt(delivery=delivery)
    if error and delivery.status == DeliveryStatus.RETRYING:
        delay = alert_retry_delay_s(attempts=delivery.attempts)
        logger.warning("alert %s attempt %s failed (%s); retrying in %ss", delivery_id, delivery.attempts, error, delay)
        raise self.retry(countdown=delay)
    return delivery.status


@kiln_task(name="kiln.scheduler_action", max_retries=None)
def scheduler_action_run(self, action_id: int) -> str:
    """Drain/resume one node; on failure retry with exponential backoff (KILN_SCHEDULER_HOOK_*)."""
    from portal.health.models import ActionStatus
    from portal.health.services import scheduler_action_execute, scheduler_action_retry_delay_s

    action = scheduler_action_execute(action_id=action_id)
    if action.status == ActionStatus.RETRYING:
        delay = scheduler_action_retry_delay_s(attempts=action.attempts)
        logger.warning("scheduler action %s attempt %s failed; retrying in %ss", action_id, action.attempts, delay)
        raise self.retry(countdown=delay)
    return action.status


@kiln_task(name="kiln.reap")
def reap(self) -> list[int]:
    """One reaper pass on demand, as the default queue's worker (nothing schedules it: the reaper
    runs in its own threads, portal/execution/reaping.py; an older Kiln's queued message still runs)."""
    from portal.execution.reaper import reaper_pass
    from portal.runs.queues import default_queue

    return reaper_pass(queues=[default_queue()])
