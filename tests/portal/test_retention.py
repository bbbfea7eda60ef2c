"""Retention (portal/runs/retention.py): old raw output and full telemetry go; measurements,
summaries and the charts' views stay; active and campaign runs are never touched."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from portal.inventory.models import Cluster
from portal.runs import rawoutput
from portal.runs.models import VIEW_POINTS, CheckResult, Measurement, Run, Series
from portal.runs.retention import retention_apply

LATER = timedelta(days=200)  # past both 90-day defaults
POINTS = 3 * VIEW_POINTS
_rng = random.Random(12)
TEMPERATURES = [round(60 + 20 * _rng.random(), 1) for _ in range(POINTS)]  # a noisy 1 Hz GPU temperature


def give_evidence(run: Run, *, status: str = "pass") -> Run:
    """Every result of `run` gets raw output, a long display copy, a measurement and a long series;
    the run is closed with a summary (unless `status` is active)."""
    packed = rawoutput.pack([b"line\n" * 20000], cap=100000)
    for result in CheckResult.objects.filter(run=run):
        CheckResult.objects.filter(pk=result.pk).update(
            status=status,
            stdout=packed.display,
            stdout_raw=packed.compressed,
            stdout_sha256=packed.sha256,
            stderr_raw=rawoutput.pack([b"warning\n"], cap=100).compressed,
        )
        Measurement.objects.create(result=result, name="gpu_count", value=8)
        Series.objects.create(result=result, name="temp", gpu=0, x=list(range(POINTS)), y=TEMPERATURES)
    run.status = status
    if status not in ("queued", "running"):
        run.finished_at = timezone.now()
        run.summary = {"results": run.results.count(), "counts": {status: run.results.count()}}
    run.save()
    return run


@pytest.fixture
def evidenced_run(cluster: Cluster, make_run: Callable[..., Run]) -> Callable[..., Run]:
    def make(status: str = "pass") -> Run:
        return give_evidence(make_run(cluster), status=status)

    return make


def raw_left(run: Run) -> int:
    return CheckResult.objects.filter(run=run, stdout_raw__isnull=False).count()


def full_series(run: Run) -> int:
    return Series.objects.filter(result__run=run, count=POINTS).count()


def later() -> datetime:
    return timezone.now() + LATER


def test_it_removes_old_raw_output_and_full_telemetry_and_keeps_the_rest(evidenced_run) -> None:
    run = evidenced_run()
    series = Series.objects.filter(result__run=run).first()
    assert series is not None
    view, digest = series.view(), series.points_sha256
    measurements = Measurement.objects.filter(result__run=run).count()
    report = retention_apply(now=later())
    assert report.results_expired == run.results.count() == 8
    assert report.raw_output_bytes > 0 and report.series_thinned == 8 and report.series_bytes > 0
    result = CheckResult.objects.filter(run=run).defer(None).first()
    assert result is not None
    assert result.stdout_raw is None and result.stderr_raw is None and result.output_expired_at is not None
    assert result.stdout_sha256 == rawoutput.pack([b"line\n" * 20000], cap=1).sha256  # the digest stays
    assert len(result.stdout) < 4200 and "removed by retention" in result.stdout
    assert result.stdout.startswith("line\n") and result.stdout.endswith("line\n")
    series.refresh_from_db()
    assert series.thinned_at is not None and series.count == VIEW_POINTS
    assert series.view() == view and (series.x, series.y) == view  # the chart draws the same
    assert series.points_sha256 == digest
    assert Measurement.objects.filter(result__run=run).count() == measurements
    run.refresh_from_db()
    assert run.summary["results"] == 8


def test_it_leaves_recent_runs_alone(evidenced_run) -> None:
    run = evidenced_run()
    report = retention_apply()
    assert (report.results_expired, report.series_thinned) == (0, 0)
    assert raw_left(run) == 8 and full_series(run) == 8


def test_it_leaves_active_runs_alone(evidenced_run) -> None:
    running = evidenced_run(status="running")
    done = evidenced_run()
    report = retention_apply(now=later())
    assert raw_left(running) == 8 and full_series(running) == 8
    assert raw_left(done) == 0 and full_series(done) == 0
    assert report.runs_kept_active == 1


def test_it_leaves_runs_of_a_campaign_alone(evidenced_run, quick_plan) -> None:
    from portal.certificates.models import Campaign, CampaignRun

    run = evidenced_run()
    campaign = Campaign.objects.create(cluster=run.cluster, plan=quick_plan, name="open", plan_snapshot={})
    CampaignRun.objects.create(campaign=campaign, run=run)
    other = evidenced_run()
    report = retention_apply(now=later())
    assert raw_left(run) == 8 and full_series(run) == 8
    assert raw_left(other) == 0 and report.runs_kept_campaign == 1


def test_a_second_pass_removes_nothing(evidenced_run) -> None:
    evidenced_run()
    first = retention_apply(now=later())
    second = retention_apply(now=later())
    assert first.results_expired == 8
    assert (second.results_expired, second.raw_output_bytes, second.series_thinned, second.series_bytes) == (0, 0, 0, 0)


def test_a_dry_run_changes_nothing_and_counts_what_a_pass_removes(evidenced_run) -> None:
    run = evidenced_run()
    dry = retention_apply(now=later(), dry_run=True)
    assert raw_left(run) == 8 and full_series(run) == 8
    assert not CheckResult.objects.filter(run=run, output_expired_at__isnull=False).exists()
    real = retention_apply(now=later())
    assert (dry.results_expired, dry.raw_output_bytes, dry.series_thinned) == (
        real.results_expired,
        real.raw_output_bytes,
        real.series_thinned,
    )


def test_it_works_in_bounded_batches(evidenced_run) -> None:
    evidenced_run()
    lines: list[str] = []
    report = retention_apply(now=later(), batch=3, progress=lines.append)
    assert report.results_expired == 8 and report.series_thinned == 8
    assert sum(line.startswith("raw output:") for line in lines) == 3  # 3 + 3 + 2
    assert sum(line.startswith("telemetry:") for line in lines) == 3


def test_a_policy_of_zero_days_keeps_everything(evidenced_run, settings) -> None:
    settings.KILN_RETENTION_RAW_OUTPUT_DAYS = None
    settings.KILN_RETENTION_TELEMETRY_DAYS = None
    run = evidenced_run()
    report = retention_apply(now=later())
    assert (report.results_expired, report.series_thinned) == (0, 0)
    assert raw_left(run) == 8 and full_series(run) == 8


def age(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now() - LATER)


def test_the_command_says_what_it_would_remove_then_removes_it(evidenced_run) -> None:
    run = evidenced_run()
    age(run)
    out = StringIO()
    call_command("kiln_retention", "--dry-run", stdout=out)
    assert "dry run (nothing changed)" in out.getvalue() and "would remove that of 8 result(s)" in out.getvalue()
    assert raw_left(run) == 8
    out = StringIO()
    call_command("kiln_retention", stdout=out)
    assert "... raw output: 8 result(s) done" in out.getvalue() and "removed that of 8 result(s)" in out.getvalue()
    assert raw_left(run) == 0
    out = StringIO()
    call_command("kiln_retention", "--json", stdout=out)
    assert json.loads(out.getvalue())["results_expired"] == 0


def test_the_daily_task_is_scheduled(db) -> None:
    task = PeriodicTask.objects.get(name="kiln-retention")
    assert task.task == "kiln.retention" and task.enabled and task.crontab is not None
    assert (task.crontab.minute, task.crontab.hour) == ("30", "3")


def test_the_task_applies_the_policy(evidenced_run) -> None:
    from portal.runs.tasks import retention

    run = evidenced_run()
    age(run)
    assert retention.apply().get()["results_expired"] == 8
