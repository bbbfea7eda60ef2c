"""Scheduled runs: crontab schedules kept in django-celery-beat, and the run each firing starts."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from portal.health.crontab import ScheduleError, crontab_parse
from portal.health.models import (
    Schedule,
    ScheduledFire,
)
from portal.inventory.models import Cluster
from portal.runs.models import Run
from portal.runs.services import RunStartError, nodes_select, run_start

logger = logging.getLogger(__name__)


def _periodic_task_sync(schedule: Schedule) -> None:

    fields = crontab_parse(schedule.crontab)
    cron, _ = CrontabSchedule.objects.get_or_create(**fields, timezone="UTC")
    defaults = {
        "task": "kiln.scheduled_run",
        "crontab": cron,
        "interval": None,
        "kwargs": json.dumps({"schedule_id": schedule.pk}),
        "enabled": schedule.enabled,
        "description": f"Kiln schedule #{schedule.pk}: {schedule.plan.slug} on {schedule.cluster.name}",
    }
    task, _ = PeriodicTask.objects.update_or_create(name=f"kiln-schedule-{schedule.pk}", defaults=defaults)
    if schedule.periodic_task_id != task.pk:
        schedule.periodic_task = task
        schedule.save(update_fields=["periodic_task"])


def _schedule_validate(*, cluster: Cluster, crontab: str, node_set: str) -> str:
    """The normalised crontab; ScheduleError when the crontab or the node set is wrong."""

    crontab = " ".join(crontab.split())
    crontab_parse(crontab)
    try:
        nodes_select(cluster=cluster, node_set=node_set)
    except RunStartError as exc:
        raise ScheduleError(str(exc)) from None
    return crontab


@transaction.atomic
def schedule_create(
    *, name: str, cluster: Cluster, plan: Any, crontab: str, node_set: str = "", created_by: Any = None
) -> Schedule:
    crontab = _schedule_validate(cluster=cluster, crontab=crontab, node_set=node_set)
    schedule = Schedule.objects.create(
        name=name,
        cluster=cluster,
        plan=plan,
        crontab=crontab,
        node_set=node_set.strip(),
        created_by=created_by if getattr(created_by, "pk", None) else None,
    )
    _periodic_task_sync(schedule)
    return schedule


@transaction.atomic
def schedule_update(
    *, schedule: Schedule, name: str, cluster: Cluster, plan: Any, crontab: str, node_set: str = ""
) -> Schedule:
    """Change a schedule; beat's DatabaseScheduler sees the new crontab without a restart. Runs it
    already started keep the plan they snapshot."""
    crontab = _schedule_validate(cluster=cluster, crontab=crontab, node_set=node_set)
    schedule.name, schedule.cluster, schedule.plan = name, cluster, plan
    schedule.crontab, schedule.node_set = crontab, node_set.strip()
    schedule.save(update_fields=["name", "cluster", "plan", "crontab", "node_set"])
    _periodic_task_sync(schedule)
    return schedule


@transaction.atomic
def schedule_set_enabled(*, schedule: Schedule, enabled: bool) -> Schedule:
    schedule.enabled = enabled
    schedule.save(update_fields=["enabled"])
    _periodic_task_sync(schedule)
    return schedule


@transaction.atomic
def schedule_delete(*, schedule: Schedule) -> None:
    task = schedule.periodic_task
    schedule.delete()
    if task is not None:
        task.delete()  # PeriodicTask's own delete signal tells beat to reload


def scheduled_run_fire(*, schedule_id: int, task_id: str = "", now: datetime | None = None) -> Run | None:
    """Start the schedule's run for this firing, once. The firing is the beat tick's minute (crontab
    granularity); a redelivered message (same task id) or a second beat in the same minute finds
    the ScheduledFire row and starts nothing."""

    schedule = Schedule.objects.select_related("cluster", "plan", "created_by").filter(pk=schedule_id).first()
    if schedule is None or not schedule.enabled:
        return None
    fire_time = (now or timezone.now()).replace(second=0, microsecond=0)
    if task_id and ScheduledFire.objects.filter(schedule=schedule, task_id=task_id).exists():
        return None
    try:
        with transaction.atomic():
            fire = ScheduledFire.objects.create(schedule=schedule, fire_time=fire_time, task_id=task_id)
            nodes = nodes_select(cluster=schedule.cluster, node_set=schedule.node_set)
            run = run_start(cluster=schedule.cluster, plan=schedule.plan, nodes=nodes, requested_by=schedule.created_by)
            fire.run = run
            fire.save(update_fields=["run"])
    except IntegrityError:
        return None  # this minute's firing already happened
    except RunStartError as exc:
        ScheduledFire.objects.get_or_create(
            schedule=schedule, fire_time=fire_time, defaults={"task_id": task_id, "error": str(exc)[:2000]}
        )
        logger.warning("schedule %s: %s", schedule.pk, exc)
        return None
    logger.info("schedule %s started run %s", schedule.pk, run.pk)
    return run
