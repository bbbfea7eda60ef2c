"""Retention: what a finished run keeps as it ages (docs/operations/retention.md).

- Raw output (CheckResult.stdout_raw/stderr_raw, up to 2 x 16 MiB compressed per result) is removed
  KILN_RETENTION_RAW_OUTPUT_DAYS after the run finished; the display copies are cut to an excerpt of
  KILN_RETENTION_OUTPUT_EXCERPT characters; the SHA-256 digests, command, exit code and reason stay.
- Full-resolution telemetry (Series longer than the charts' view) is thinned after
  KILN_RETENTION_TELEMETRY_DAYS: its points become the stored 1,500-point LTTB view, which is what
  the charts draw anyway; points_sha256 still names the full points as recorded.
- Measurements, RunMetric and Run.summary are kept. On PostgreSQL the coming months' measurement
  partitions are made, and whole expired months dropped when KILN_RETENTION_MEASUREMENT_MONTHS is
  set (portal/runs/partitions.py).

Never touched: runs still queued or running, and runs in a campaign (certified or not yet: an open
campaign's runs may become a certificate's evidence). The certified-evidence triggers
(portal/certificates/immutability.py) refuse any change to a certified result as a last line.
Work goes in transactions of at most KILN_RETENTION_BATCH rows; each marks what it did
(output_expired_at, thinned_at), so a second pass finds nothing and an interrupted one resumes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Case, CharField, F, Q, QuerySet, Sum, TextField, Value, When
from django.db.models.functions import Cast, Coalesce, Concat, Left, Length, Right
from django.utils import timezone

from portal.runs import packing, partitions
from portal.runs.models import ACTIVE_STATUSES, VIEW_POINTS, CheckResult, Run, Series

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]
TASK_NAME = "kiln.retention"
PERIODIC_TASK = "kiln-retention"


@dataclass
class RetentionReport:
    """What one pass removed (or, dry, would remove)."""

    dry_run: bool
    output_cutoff: datetime | None
    telemetry_cutoff: datetime | None
    results_expired: int = 0
    raw_output_bytes: int = 0
    series_thinned: int = 0
    series_bytes: int = 0
    runs_kept_campaign: int = 0
    runs_kept_active: int = 0
    batches_refused: int = 0
    partitions: dict[str, list[str]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("output_cutoff", "telemetry_cutoff"):
            out[key] = out[key].isoformat() if out[key] else None
        return out

    def lines(self) -> list[str]:
        verb = "would remove" if self.dry_run else "removed"
        lines = [
            f"raw output (finished before {_day(self.output_cutoff)}): {verb} that of {self.results_expired} "
            f"result(s), {self.raw_output_bytes} bytes compressed",
            f"telemetry (finished before {_day(self.telemetry_cutoff)}): {verb} the full points of "
            f"{self.series_thinned} series, {self.series_bytes} bytes packed (their chart views stay)",
            f"kept whole: {self.runs_kept_campaign} old run(s) in a campaign, {self.runs_kept_active} still active",
        ]
        if self.batches_refused:
            lines.append(f"{self.batches_refused} batch(es) refused by the certified-evidence triggers (left as is)")
        lines += [f"partitions {what}: {', '.join(names)}" for what, names in self.partitions.items() if names]
        return lines


def _day(moment: datetime | None) -> str:
    return moment.date().isoformat() if moment else "never (kept forever)"


def _cutoff(now: datetime, days: int | None) -> datetime | None:
    return now - timedelta(days=days) if days else None


def old_runs(cutoff: datetime) -> QuerySet[Run]:
    """Finished runs older than `cutoff` (by finish, else by creation) that no campaign holds."""
    aged = Q(finished_at__lt=cutoff) | Q(finished_at__isnull=True, created_at__lt=cutoff)
    return (
        Run.objects.filter(aged)
        .exclude(status__in=ACTIVE_STATUSES)
        .filter(campaign_link__isnull=True)
        .exclude(results__certified_by__isnull=False)
    )


def _kept_counts(report: RetentionReport, cutoff: datetime) -> None:
    aged = Run.objects.filter(Q(finished_at__lt=cutoff) | Q(finished_at__isnull=True, created_at__lt=cutoff))
    report.runs_kept_active = aged.filter(status__in=ACTIVE_STATUSES).count()
    held = Q(campaign_link__isnull=False) | Q(results__certified_by__isnull=False)
    report.runs_kept_campaign = aged.exclude(status__in=ACTIVE_STATUSES).filter(held).distinct().count()


def _batches(queryset: QuerySet[Any], size: int) -> Any:
    """Primary keys of `queryset` in ascending chunks of `size` (one query per chunk)."""
    last = 0
    while True:
        ids = list(queryset.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:size])
        if not ids:
            return
        yield ids
        last = ids[-1]


def _raw_bytes(results: QuerySet[CheckResult]) -> int:
    sizes = results.aggregate(
        out=Sum(Coalesce(Length("stdout_raw"), Value(0))), err=Sum(Coalesce(Length("stderr_raw"), Value(0)))
    )
    return int(sizes["out"] or 0) + int(sizes["err"] or 0)


def _cut(column: str, *, excerpt: int, note: str) -> Case:
    """SQL for rawoutput.excerpt of `column`: one UPDATE cuts a batch, no text crosses the wire."""
    head, tail = excerpt * 3 // 4, excerpt - excerpt * 3 // 4
    cut = Concat(
        Left(column, head),
        Value("\n[... "),
        Cast(Length(column) - excerpt, output_field=CharField()),
        Value(f" characters {note} ...]\n"),
        Right(column, tail),
        output_field=TextField(),
    )
    return Case(When(**{f"{column}_len__gt": excerpt}, then=cut), default=F(column))


def _expire_batch(ids: list[int], *, now: datetime, excerpt: int) -> int:
    """Remove the raw output of results `ids` and cut their display copies; the bytes removed."""
    note = f"removed by retention on {now.date().isoformat()}; the raw output expired"
    with transaction.atomic():
        results = CheckResult.objects.filter(pk__in=ids, output_expired_at__isnull=True)
        removed = _raw_bytes(results)
        results.annotate(stdout_len=Length("stdout"), stderr_len=Length("stderr")).update(
            stdout=_cut("stdout", excerpt=excerpt, note=note),
            stderr=_cut("stderr", excerpt=excerpt, note=note),
            stdout_raw=None,
            stderr_raw=None,
            output_expired_at=now,
        )
    return removed


def outputs_expire(report: RetentionReport, *, now: datetime, batch: int, progress: Progress) -> None:
    if report.output_cutoff is None:
        return
    pending = CheckResult.objects.filter(run__in=old_runs(report.output_cutoff), output_expired_at__isnull=True)
    if report.dry_run:
        report.results_expired = pending.count()
        report.raw_output_bytes = _raw_bytes(pending)
        return
    excerpt = settings.KILN_RETENTION_OUTPUT_EXCERPT
    for ids in _batches(pending, batch):
        try:
            report.raw_output_bytes += _expire_batch(ids, now=now, excerpt=excerpt)
            report.results_expired += len(ids)
        except IntegrityError as exc:  # certified meanwhile: the triggers said no
            report.batches_refused += 1
            logger.warning("retention: results %s..%s left as they are: %s", ids[0], ids[-1], exc)
        progress(f"raw output: {report.results_expired} result(s) done, {report.raw_output_bytes} bytes removed")


def _thin_batch(ids: list[int], *, now: datetime) -> int:
    """Replace the points of series `ids` by their stored views; the packed bytes removed."""
    with transaction.atomic():
        rows = list(
            Series.objects.filter(pk__in=ids, thinned_at__isnull=True)
            .annotate(size=Length("x_packed") + Length("y_packed"))
            .only("pk", "view_packed")
        )
        for row in rows:
            x, y = packing.unpack_pair(row.view_packed)
            row.x_packed, row.y_packed, row.count, row.thinned_at = packing.pack(x), packing.pack(y), len(x), now
        # bulk_update, not save(): save() would take the view and digest of the thinned points.
        Series.objects.bulk_update(rows, ["x_packed", "y_packed", "count", "thinned_at"])
    return sum(row.size - len(row.x_packed) - len(row.y_packed) for row in rows)  # type: ignore[attr-defined]


def telemetry_thin(report: RetentionReport, *, now: datetime, batch: int, progress: Progress) -> None:
    if report.telemetry_cutoff is None:
        return
    pending = Series.objects.filter(
        result__run__in=old_runs(report.telemetry_cutoff), thinned_at__isnull=True, count__gt=VIEW_POINTS
    ).exclude(view_packed=b"")  # no view (x not numbers): nothing to thin to, kept whole
    if report.dry_run:
        report.series_thinned = pending.count()
        sizes = pending.aggregate(x=Sum(Length("x_packed")), y=Sum(Length("y_packed")))
        report.series_bytes = int(sizes["x"] or 0) + int(sizes["y"] or 0)
        return
    for ids in _batches(pending, batch):
        try:
            report.series_bytes += _thin_batch(ids, now=now)
            report.series_thinned += len(ids)
        except IntegrityError as exc:
            report.batches_refused += 1
            logger.warning("retention: series %s..%s left as they are: %s", ids[0], ids[-1], exc)
        progress(f"telemetry: {report.series_thinned} series thinned, {report.series_bytes} bytes removed")


def retention_apply(
    *, now: datetime | None = None, dry_run: bool = False, batch: int | None = None, progress: Progress | None = None
) -> RetentionReport:
    """Apply the retention policy once (idempotent); `dry_run` counts without changing anything."""
    now = now or timezone.now()
    batch = batch or settings.KILN_RETENTION_BATCH
    say = progress or (lambda line: logger.info("retention: %s", line))
    report = RetentionReport(
        dry_run=dry_run,
        output_cutoff=_cutoff(now, settings.KILN_RETENTION_RAW_OUTPUT_DAYS),
        telemetry_cutoff=_cutoff(now, settings.KILN_RETENTION_TELEMETRY_DAYS),
    )
    oldest = min((c for c in (report.output_cutoff, report.telemetry_cutoff) if c), default=None)
    if oldest is not None:
        _kept_counts(report, oldest)
    outputs_expire(report, now=now, batch=batch, progress=say)
    telemetry_thin(report, now=now, batch=batch, progress=say)
    report.partitions = partitions.maintain(now=now, dry_run=dry_run, progress=say)
    return report


def retention_schedule_ensure() -> None:
    """The daily PeriodicTask `kiln-retention` (KILN_RETENTION_CRON, UTC). Called at post_migrate."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    minute, hour, day_of_month, month_of_year, day_of_week = settings.KILN_RETENTION_CRON.split()
    cron, _ = CrontabSchedule.objects.get_or_create(
        minute=minute,
        hour=hour,
        day_of_month=day_of_month,
        month_of_year=month_of_year,
        day_of_week=day_of_week,
        timezone="UTC",
    )
    PeriodicTask.objects.update_or_create(
        name=PERIODIC_TASK,
        defaults={
            "task": TASK_NAME,
            "crontab": cron,
            "interval": None,
            "enabled": True,
            "description": (
                "Retention (see the documentation): removes old raw output, thins old full-resolution telemetry, "
                "makes the coming months' measurement partitions; never touches campaign or active runs."
            ),
        },
    )
