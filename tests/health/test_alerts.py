"""Alerts: on transitions only (and recovery), by webhook and email, retried, recorded."""

from __future__ import annotations

import pytest
from django.core import mail

from portal.health.models import AlertDelivery, ClusterHealthSettings
from tests.health.helpers import finish

pytestmark = pytest.mark.django_db


@pytest.fixture
def alerting(cluster, webhook):
    return ClusterHealthSettings.objects.create(
        cluster=cluster, webhook_url=webhook.url, alert_emails="ops@example.org"
    )


def test_it_alerts_once_per_transition_and_again_on_recovery(
    cluster, make_run, alerting, webhook, eager_celery, django_capture_on_commit_callbacks
) -> None:
    capture = django_capture_on_commit_callbacks
    finish(make_run(cluster), capture=capture)  # unknown -> healthy everywhere: no news
    assert webhook.bodies == [] and mail.outbox == []
    run = finish(make_run(cluster), {"n02": ("fail", "GPU 3: uncorrectable ECC")}, capture)
    assert len(webhook.bodies) == 1
    body = webhook.bodies[0]
    assert (body["cluster"], body["node"], body["from"], body["to"], body["run_id"]) == (
        "c1",
        "n02",
        "healthy",
        "failed",
        run.pk,
    )
    assert "GPU 3: uncorrectable ECC" in body["text"] and body["recovery"] is False
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["ops@example.org"]
    assert "n02: healthy → failed" in mail.outbox[0].subject
    finish(make_run(cluster), {"n02": ("fail", "GPU 3: uncorrectable ECC")}, capture)
    assert len(webhook.bodies) == 1  # same problem, no new alert
    finish(make_run(cluster), capture=capture)
    assert len(webhook.bodies) == 2 and webhook.bodies[1]["recovery"] is True
    assert set(AlertDelivery.objects.values_list("status", flat=True)) == {"sent"}


def test_it_sends_a_slack_compatible_body(
    cluster, make_run, alerting, webhook, eager_celery, django_capture_on_commit_callbacks
) -> None:
    alerting.webhook_format = "slack"
    alerting.save()
    finish(make_run(cluster), {"n01": ("fail", "Xid 79")}, django_capture_on_commit_callbacks)
    assert list(webhook.bodies[0]) == ["text"]
    assert "n01: unknown → failed" in webhook.bodies[0]["text"]


def test_it_retries_a_failed_delivery_and_records_it(cluster, make_run, alerting, webhook, settings) -> None:
    from portal.health import services
    from portal.health.tasks import alert_deliver

    settings.KILN_ALERT_MAX_ATTEMPTS = 3
    webhook.statuses = [500, 502, 503]
    alerting.alert_emails = ""
    alerting.save()
    finish(make_run(cluster), {"n01": ("fail", "Xid 79")})
    services.health_evaluate_run(run_id=cluster.runs.first().pk)
    delivery = AlertDelivery.objects.get()
    result = alert_deliver.apply(args=[delivery.pk])  # eager: retries run in place
    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.attempts == 3
    assert delivery.last_error.startswith("HTTP 503")
    assert len(webhook.bodies) == 3
    assert result.state in ("SUCCESS", "RETRY")


def test_it_succeeds_on_a_later_attempt(cluster, make_run, alerting, webhook) -> None:
    from portal.health import services
    from portal.health.tasks import alert_deliver

    webhook.statuses = [500]
    alerting.alert_emails = ""
    alerting.save()
    finish(make_run(cluster), {"n01": ("fail", "Xid 79")})
    services.health_evaluate_run(run_id=cluster.runs.first().pk)
    delivery = AlertDelivery.objects.get()
    alert_deliver.apply(args=[delivery.pk])
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("sent", 2, "")


def test_it_backs_off_exponentially(settings) -> None:
    from portal.health.services import alert_retry_delay_s

    settings.KILN_ALERT_RETRY_BASE_S = 10
    assert [alert_retry_delay_s(attempts=n) for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert alert_retry_delay_s(attempts=30) == 3600


def test_it_records_an_unreachable_webhook(cluster, make_run, settings) -> None:
    from portal.health import services

    settings.KILN_ALERT_MAX_ATTEMPTS = 1
    ClusterHealthSettings.objects.create(cluster=cluster, webhook_url="http://127.0.0.1:9/nothing")
    finish(make_run(cluster), {"n01": ("fail", "Xid 79")})
    services.health_evaluate_run(run_id=cluster.runs.first().pk)
    delivery = AlertDelivery.objects.get()
    services.alert_attempt(delivery=delivery)
    assert delivery.status == "failed" and "cannot reach" in delivery.last_error
