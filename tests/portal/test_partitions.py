"""Monthly measurement partitions on PostgreSQL (migration runs 0013, portal/runs/partitions.py):
rows land in their month, months are made ahead, and an expired month leaves whole when the policy
asks, never one holding evidence a run still needs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from portal.runs import partitions
from portal.runs.models import Measurement, Run
from portal.runs.retention import retention_apply
from tests.portal.test_retention import give_evidence

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="partitions exist on PostgreSQL only")


def test_the_table_is_partitioned_with_months_ahead_and_a_default(db) -> None:
    assert partitions.is_partitioned()
    months = partitions.month_partitions()
    now = timezone.now()
    for add in range(4):  # this month and KILN_RETENTION_PARTITIONS_AHEAD (3) more, made at migrate
        assert partitions.partition_name(partitions.month_start(now, add=add)) in months
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_inherits WHERE inhrelid = 'runs_measurement_default'::regclass")
        assert cursor.fetchone() is not None


def test_a_measurement_lands_in_its_month(cluster, make_run) -> None:
    result = make_run(cluster).results.first()
    now = timezone.now()
    here = Measurement.objects.create(result=result, name="a", value=1)
    assert partitions.partition_of(here.pk) == partitions.partition_name(partitions.month_start(now))
    later = Measurement.objects.create(result=result, name="b", value=2, recorded_at=now + timedelta(days=40))
    assert partitions.partition_of(later.pk) == partitions.partition_name(partitions.month_start(now, add=1))
    stray = Measurement.objects.create(result=result, name="c", recorded_at=datetime(2001, 5, 1, tzinfo=UTC))
    assert partitions.partition_of(stray.pk) == "runs_measurement_default"


def test_the_task_makes_the_coming_months_once(db) -> None:
    far = timezone.now() + timedelta(days=3 * 365)
    first = retention_apply(now=far)
    names = [partitions.partition_name(partitions.month_start(far, add=add)) for add in range(4)]
    assert first.partitions["made"] == names
    assert retention_apply(now=far).partitions["made"] == []
    assert set(names) <= set(partitions.month_partitions())


def test_a_month_whose_rows_sit_in_the_default_partition_is_not_made(cluster, make_run) -> None:
    result = make_run(cluster).results.first()
    far = timezone.now() + timedelta(days=5 * 365)
    Measurement.objects.create(result=result, name="early", recorded_at=far)
    report = retention_apply(now=far)
    name = partitions.partition_name(partitions.month_start(far))
    assert report.partitions["not made (rows in the default partition)"] == [name]
    assert name not in partitions.month_partitions()
    assert Measurement.objects.filter(name="early").exists()


def test_measurements_are_kept_unless_the_policy_says_otherwise(cluster, make_run) -> None:
    run = give_evidence(make_run(cluster))
    report = retention_apply(now=timezone.now() + timedelta(days=800))
    assert report.partitions["dropped"] == []
    assert Measurement.objects.filter(result__run=run).count() == 8


def test_an_expired_month_is_dropped_whole(cluster, make_run, settings) -> None:
    settings.KILN_RETENTION_MEASUREMENT_MONTHS = 12
    old = give_evidence(make_run(cluster))
    name = partitions.partition_name(partitions.month_start(timezone.now()))
    dry = retention_apply(now=timezone.now() + timedelta(days=400), dry_run=True)
    assert name in dry.partitions["dropped"] and Measurement.objects.filter(result__run=old).count() == 8
    report = retention_apply(now=timezone.now() + timedelta(days=400))
    assert name in report.partitions["dropped"] and name not in partitions.month_partitions()
    assert not Measurement.objects.filter(result__run=old).exists()
    old.refresh_from_db()
    assert old.summary["results"] == 8  # the summary stays
    assert retention_apply(now=timezone.now() + timedelta(days=400)).partitions["dropped"] == []


def test_a_month_holding_an_active_run_is_kept(cluster, make_run, settings) -> None:
    settings.KILN_RETENTION_MEASUREMENT_MONTHS = 12
    running = give_evidence(make_run(cluster), status="running")
    name = partitions.partition_name(partitions.month_start(timezone.now()))
    report = retention_apply(now=timezone.now() + timedelta(days=400))
    assert report.partitions["kept (evidence)"] == [name] and name in partitions.month_partitions()
    assert Measurement.objects.filter(result__run=running).count() == 8
    assert Run.objects.filter(pk=running.pk).exists()
