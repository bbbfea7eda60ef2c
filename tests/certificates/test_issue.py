"""Issuing after the second signature: a task renders and seals outside the request, records the
certificate only over the evidence both sides signed, and shows progress, failure and retry."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.certificates import pdf, services
from portal.certificates.models import Certificate, Signature
from portal.certificates.tasks import certificate_issue_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def both_signed(campaign, campaign_run, users, django_capture_on_commit_callbacks, monkeypatch):
    """Both sides signed; returns the campaign ids the second signature queued for issuing."""
    queued: list[int] = []
    monkeypatch.setattr(services.issuing, "_enqueue_issue", queued.append)
    campaign_run()
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    with django_capture_on_commit_callbacks(execute=True):
        services.certificate_sign(campaign=campaign, user=users["customer"])
    return queued


def test_the_second_signature_queues_the_issue_instead_of_rendering(campaign, both_signed) -> None:
    assert both_signed == [campaign.pk]
    campaign.refresh_from_db()
    assert campaign.issue_requested_at is not None and campaign.issue_error == ""
    assert not Certificate.objects.exists()


def test_the_task_issues_once_and_settles_the_campaign(campaign, both_signed) -> None:
    number = certificate_issue_task.apply(args=[campaign.pk]).get()
    certificate = Certificate.objects.get()
    assert certificate.number == number and number.startswith("KILN-c1-")
    assert sorted(certificate.signatures.values_list("side", flat=True)) == ["customer", "vendor"]
    campaign.refresh_from_db()
    assert campaign.issue_requested_at is None
    assert certificate_issue_task.apply(args=[campaign.pk]).get() is None, "a redelivered task issues nothing more"
    assert Certificate.objects.count() == 1
    assert list(campaign.audit.filter(action="certificate issued").values_list("username", flat=True)) == ["system"]


def test_it_issues_nothing_when_the_evidence_changed_after_both_signed(campaign, campaign_run, both_signed) -> None:
    campaign_run(node_set="n02", statuses={("n02", "ecc-health"): "warn"})
    assert services.certificate_issue(campaign_id=campaign.pk) is None
    assert not Certificate.objects.exists()
    assert Signature.objects.filter(withdrawn=True).count() == 2
    campaign.refresh_from_db()
    assert campaign.issue_requested_at is None
    assert campaign.audit.filter(action="signature withdrawn").count() == 2


def test_it_issues_nothing_when_the_evidence_changes_while_it_renders(
    campaign, campaign_run, both_signed, monkeypatch
) -> None:
    render = pdf.pdf_render

    def render_while_a_run_lands(**kwargs):
        campaign_run(node_set="n03", statuses={("n03", "ecc-health"): "warn"})
        return render(**kwargs)

    monkeypatch.setattr(pdf, "pdf_render", render_while_a_run_lands)
    assert services.certificate_issue(campaign_id=campaign.pk) is None
    assert not Certificate.objects.exists()
    assert Signature.objects.filter(withdrawn=True).count() == 2


def test_a_failure_is_shown_and_an_approver_retries(
    campaign, both_signed, users, client, settings, tmp_path, django_capture_on_commit_callbacks
) -> None:
    good_keys = settings.KILN_KEY_DIR
    settings.KILN_KEY_DIR = str(tmp_path / "a-worker-without-the-shared-folder")
    assert certificate_issue_task.apply(args=[campaign.pk]).get() is None
    campaign.refresh_from_db()
    assert "no site signing key" in campaign.issue_error and "kiln keys init" in campaign.issue_error
    assert campaign.issue_requested_at is not None
    assert not (tmp_path / "a-worker-without-the-shared-folder").exists(), "a worker never makes a key"
    assert campaign.audit.filter(action="certificate issue failed").exists()
    client.force_login(users["viewer"])
    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()
    assert 'id="issue-failed"' in page and "kiln keys init" in page and "Retry issuing" not in page
    client.force_login(users["customer"])
    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()
    assert "Retry issuing" in page and 'id="sign-form"' not in page, "no third signature while issuing"

    settings.KILN_KEY_DIR = good_keys  # the administrator mounts the shared key folder
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("certificates:campaign_issue_retry", args=[campaign.pk]))
    assert response.status_code == 302 and both_signed == [campaign.pk, campaign.pk]
    campaign.refresh_from_db()
    assert campaign.issue_error == ""
    assert certificate_issue_task.apply(args=[campaign.pk]).get() == Certificate.objects.get().number


def test_the_status_banner_polls_until_the_certificate_lands(campaign, both_signed, users, client) -> None:
    client.force_login(users["viewer"])
    status = reverse("certificates:campaign_issue_status", args=[campaign.pk])
    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()
    assert 'id="issuing"' in page and f'hx-get="{status}"' in page
    polled = client.get(status, headers={"HX-Request": "true"})
    assert "HX-Refresh" not in polled and "being issued" in polled.content.decode()
    services.certificate_issue(campaign_id=campaign.pk)
    polled = client.get(status, headers={"HX-Request": "true"})
    assert polled["HX-Refresh"] == "true", "the page reloads to show the certificate"
    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()
    assert 'id="issuing"' not in page and Certificate.objects.get().number in page


def test_only_approvers_retry(campaign, both_signed, users, client) -> None:
    client.force_login(users["operator"])
    assert client.post(reverse("certificates:campaign_issue_retry", args=[campaign.pk])).status_code == 403
    services.certificate_issue(campaign_id=campaign.pk)
    with pytest.raises(services.CampaignError, match="closed: certificate"):
        services.certificate_issue_retry(campaign=campaign, user=users["vendor"])


def test_a_run_started_after_both_signed_withdraws_the_signatures(campaign, both_signed, users) -> None:
    services.campaign_run_start(campaign=campaign, node_set="n03", user=users["operator"], enqueue=False)
    assert services.certificate_issue(campaign_id=campaign.pk) is None
    campaign.refresh_from_db()
    assert campaign.issue_requested_at is None and not Certificate.objects.exists()
    assert Signature.objects.filter(withdrawn=True).count() == 2, "the body lists the campaign's runs"


def test_a_campaign_that_is_not_ready_holds_the_issue_until_an_approver_retries(
    campaign, both_signed, users, client, monkeypatch
) -> None:
    real = services.issuing.campaign_state

    def active(*, campaign):  # a blocker that leaves the signed body as it was
        state = real(campaign=campaign)
        state.active_runs = [999]
        return state

    monkeypatch.setattr(services.issuing, "campaign_state", active)
    assert services.certificate_issue(campaign_id=campaign.pk) is None
    campaign.refresh_from_db()
    assert campaign.issue_requested_at is not None, "still waiting, not forgotten"
    assert campaign.issue_error == "cannot issue yet: run(s) still active: #999"
    assert Signature.objects.filter(withdrawn=False).count() == 2, "the evidence did not change"
    client.force_login(users["vendor"])
    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()
    assert "cannot issue yet" in page and "Retry issuing" in page

    monkeypatch.setattr(services.issuing, "campaign_state", real)  # the run finished
    client.post(reverse("certificates:campaign_issue_retry", args=[campaign.pk]))
    assert campaign.audit.get(action="certificate issue retried").detail.startswith("after: cannot issue yet")
    assert services.certificate_issue(campaign_id=campaign.pk) is not None


def test_a_late_failure_does_not_mark_a_newer_request_failed(campaign, both_signed, users) -> None:
    campaign.refresh_from_db()
    first_request = campaign.issue_requested_at
    services.certificate_issue_failed(campaign_id=campaign.pk, error="boom", requested_at=first_request)
    services.certificate_issue_retry(campaign=campaign, user=users["vendor"])  # a newer request
    services.certificate_issue_failed(campaign_id=campaign.pk, error="late boom", requested_at=first_request)
    campaign.refresh_from_db()
    assert campaign.issue_error == "" and campaign.issue_requested_at > first_request
    assert campaign.audit.filter(action="certificate issue failed").count() == 2, "both are on record"
