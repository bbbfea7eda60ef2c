"""Schedules: created from the UI into django-celery-beat; the scheduled task starts a run once
per firing; enable/disable/delete."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

from portal.health.models import Schedule, ScheduledFire
from portal.health.services import ScheduleError, crontab_parse, scheduled_run_fire

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(client, make_user):
    client.force_login(make_user("op", "operator"))
    return client


def _create(client, **overrides):
    data = {"name": "nightly", "cluster": "c1", "plan": "unit", "node_set": "", "crontab": "0 2 * * *", **overrides}
    return client.post(reverse("health:schedule_create"), data)


def test_it_creates_a_beat_periodic_task_from_the_form(cluster, quick_plan, operator_client) -> None:
    response = _create(operator_client, node_set="n[01-02]", crontab="*/15  3 * * 1-5")
    assert response.status_code == 302
    schedule = Schedule.objects.get()
    task = PeriodicTask.objects.get(pk=schedule.periodic_task_id)
    assert task.task == "kiln.scheduled_run" and task.enabled
    assert json.loads(task.kwargs) == {"schedule_id": schedule.pk}
    cron = task.crontab
    assert (cron.minute, cron.hour, cron.day_of_month, cron.month_of_year, cron.day_of_week) == (
        "*/15",
        "3",
        "*",
        "*",
        "1-5",
    )
    assert schedule.crontab == "*/15 3 * * 1-5" and schedule.node_set == "n[01-02]"


def test_it_refuses_a_bad_crontab_or_node_set(cluster, quick_plan, operator_client) -> None:
    assert b"expected 5 fields" in _create(operator_client, crontab="0 2 * *").content
    assert b"crontab" in _create(operator_client, crontab="99 2 * * *").content
    assert b"not nodes of cluster c1" in _create(operator_client, node_set="zz01").content
    assert not Schedule.objects.exists() and not PeriodicTask.objects.filter(task="kiln.scheduled_run").exists()
    with pytest.raises(ScheduleError):
        crontab_parse("a b c d e")


def test_it_disables_enables_and_deletes(cluster, quick_plan, operator_client) -> None:
    _create(operator_client)
    schedule = Schedule.objects.get()
    operator_client.post(reverse("health:schedule_toggle", args=[schedule.pk]), {"enabled": "0"})
    assert PeriodicTask.objects.get(pk=schedule.periodic_task_id).enabled is False
    operator_client.post(reverse("health:schedule_toggle", args=[schedule.pk]), {"enabled": "1"})
    assert PeriodicTask.objects.get(pk=schedule.periodic_task_id).enabled is True
    page = operator_client.get(reverse("health:schedules"))
    assert b"nightly" in page.content and b"0 2 * * *" in page.content
    operator_client.post(reverse("health:schedule_delete", args=[schedule.pk]))
    assert not Schedule.objects.exists() and not PeriodicTask.objects.filter(task="kiln.scheduled_run").exists()


def test_it_edits_a_schedule_and_its_beat_task(cluster, quick_plan, operator_client) -> None:
    _create(operator_client)
    schedule = Schedule.objects.get()
    url = reverse("health:schedule_edit", args=[schedule.pk])
    form = operator_client.get(url).content.decode()
    assert 'value="nightly"' in form and 'value="0 2 * * *"' in form
    data = {"name": "hourly", "cluster": "c1", "plan": "unit", "node_set": "n[01-03]", "crontab": "0 * * * *"}
    assert operator_client.post(url, {**data, "crontab": "0 2 * *"}).status_code == 200  # refused, shown
    schedule.refresh_from_db()
    assert schedule.crontab == "0 2 * * *", "a refused edit changes nothing"
    assert operator_client.post(url, data).status_code == 302
    schedule.refresh_from_db()
    assert (schedule.name, schedule.crontab, schedule.node_set) == ("hourly", "0 * * * *", "n[01-03]")
    task = PeriodicTask.objects.get(pk=schedule.periodic_task_id)
    assert (task.crontab.minute, task.crontab.hour) == ("0", "*")
    assert PeriodicTask.objects.filter(task="kiln.scheduled_run").count() == 1


def test_it_starts_one_run_per_firing(cluster, quick_plan, operator_client) -> None:
    _create(operator_client, node_set="n[01-02]")
    schedule = Schedule.objects.get()
    at = datetime(2030, 1, 1, 2, 0, 5, tzinfo=UTC)
    run = scheduled_run_fire(schedule_id=schedule.pk, task_id="t1", now=at)
    assert run is not None and run.node_set == "n[01-02]" and run.results.count() == 4
    assert scheduled_run_fire(schedule_id=schedule.pk, task_id="t1", now=at.replace(minute=7)) is None  # redelivery
    assert scheduled_run_fire(schedule_id=schedule.pk, task_id="t2", now=at.replace(second=40)) is None  # same minute
    assert scheduled_run_fire(schedule_id=schedule.pk, task_id="t3", now=at.replace(day=2)) is not None
    assert cluster.runs.count() == 2 and ScheduledFire.objects.count() == 2


def test_it_starts_nothing_for_a_disabled_schedule(cluster, quick_plan, operator_client) -> None:
    _create(operator_client)
    schedule = Schedule.objects.get()
    schedule.enabled = False
    schedule.save()
    assert scheduled_run_fire(schedule_id=schedule.pk) is None
    assert not cluster.runs.exists()


def test_it_runs_as_the_beat_task(cluster, quick_plan, operator_client, settings) -> None:
    """The task beat sends (by name, with the PeriodicTask's kwargs), applied in process."""
    from worker.celery import app

    _create(operator_client)
    task = PeriodicTask.objects.get(task="kiln.scheduled_run")
    result = app.tasks[task.task].apply(kwargs=json.loads(task.kwargs), task_id="beat-1")
    assert result.get() == cluster.runs.get().pk
    assert ScheduledFire.objects.get().task_id == "beat-1"
