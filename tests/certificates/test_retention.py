"""Retention never touches certified evidence: the runs a certificate covers keep their raw output
and full telemetry, whatever their age; revoking the certificate changes nothing."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from portal.certificates import services
from portal.runs.models import CheckResult, Series
from portal.runs.retention import retention_apply
from tests.portal.test_retention import POINTS, full_series, give_evidence, raw_left


def test_certified_runs_keep_everything_and_others_do_not(campaign, campaign_run, users, cluster, make_run) -> None:
    certified = campaign_run()
    give_evidence(certified)  # before issuing: certified results can no longer change afterwards
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.certificate_sign(campaign=campaign, user=users["customer"])
    certificate = services.certificate_issue(campaign_id=campaign.pk)
    services.certificate_revoke(certificate=certificate, reason="superseded", user=users["vendor"])
    other = give_evidence(make_run(cluster))
    report = retention_apply(now=timezone.now() + timedelta(days=400))
    assert raw_left(certified) == CheckResult.objects.filter(run=certified).count() == 8
    assert full_series(certified) == 8
    assert Series.objects.filter(result__run=certified, thinned_at__isnull=False).count() == 0
    assert raw_left(other) == 0 and full_series(other) == 0 and report.series_thinned == 8
    assert report.runs_kept_campaign == 1 and report.batches_refused == 0
    assert POINTS > 1500


def test_a_month_holding_certified_measurements_is_never_dropped(issued, cluster, make_run, settings) -> None:
    from portal.runs import partitions
    from portal.runs.models import Measurement

    if not partitions.is_partitioned():
        return  # SQLite: one plain table, nothing is dropped
    settings.KILN_RETENTION_MEASUREMENT_MONTHS = 1
    name = partitions.partition_name(partitions.month_start(timezone.now()))
    before = Measurement.objects.filter(result__certified_by__certificate=issued).count()
    report = retention_apply(now=timezone.now() + timedelta(days=400))
    assert name in report.partitions["kept (evidence)"] and name in partitions.month_partitions()
    assert before > 0 and Measurement.objects.filter(result__certified_by__certificate=issued).count() == before
