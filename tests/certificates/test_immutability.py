"""Evidence cited by an issued certificate cannot be edited or deleted, by code or through the admin."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.db.models import ProtectedError

from portal.certificates.models import AuditEvent, Certificate, CertifiedResult
from portal.certificates.signals import CertifiedEvidenceError
from portal.runs.models import CheckResult, Measurement, Run, Series

REFUSED = (CertifiedEvidenceError, ProtectedError)


@pytest.fixture
def certified(issued) -> CheckResult:
    return CheckResult.objects.get(
        pk=CertifiedResult.objects.filter(
            certificate=issued, result__node__hostname="n02", result__item_key="ecc-health"
        ).values("result")[:1]
    )


def test_it_refuses_to_edit_a_certified_result(certified):
    certified.status = "pass"
    with pytest.raises(CertifiedEvidenceError, match="cannot be edited"):
        certified.save()
    certified.refresh_from_db()
    assert certified.status == "fail"


def test_it_refuses_to_delete_a_certified_result_or_its_run(certified):
    with pytest.raises(REFUSED), transaction.atomic():
        certified.delete()
    with pytest.raises(REFUSED), transaction.atomic():
        Run.objects.filter(pk=certified.run_id).delete()
    assert CheckResult.objects.filter(pk=certified.pk).exists()


def test_it_refuses_to_edit_add_or_delete_certified_measurements(certified):
    measurement = certified.measurements.get()
    measurement.value = 0.0
    with pytest.raises(CertifiedEvidenceError, match="cannot be edited"):
        measurement.save()
    with pytest.raises(CertifiedEvidenceError, match="cannot be added"):
        Measurement.objects.create(result=certified, name="late", value=1.0)
    # Deletes run in an atomic block: a refused one poisons the enclosing test transaction, so nest it.
    with pytest.raises(CertifiedEvidenceError, match="cannot be deleted"), transaction.atomic():
        Measurement.objects.filter(result=certified).delete()
    with pytest.raises(CertifiedEvidenceError):
        Series.objects.create(result=certified, name="late", x=[0], y=[1])
    assert certified.measurements.get().value == 2.0


def test_it_still_allows_edits_of_results_no_certificate_cites(issued, cluster, make_run):
    other = make_run(cluster)
    result = other.results.first()
    result.status = "pass"
    result.save()
    Measurement.objects.create(result=result, name="fine", value=1.0)
    assert Measurement.objects.filter(result=result).delete()[0] == 1


def test_it_refuses_admin_edits_and_deletes_of_certified_evidence(certified, client, make_user):
    root = make_user("root", superuser=True)
    root.is_staff = True
    root.save()
    client.force_login(root)
    measurement = certified.measurements.get()
    response = client.post(f"/admin/runs/measurement/{measurement.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    response = client.post(
        f"/admin/runs/measurement/{measurement.pk}/change/",
        {
            "result": certified.pk,
            "name": "volatile_uncorrected",
            "value": "0",
            "text": "",
            "unit": "",
            "gpu": "0",
            "threshold": "<= 0",
            "ok": "true",
            "labels": "{}",
        },
    )
    assert response.status_code == 403
    assert Measurement.objects.get(pk=measurement.pk).value == 2.0
    client.post(f"/admin/runs/checkresult/{certified.pk}/delete/", {"post": "yes"})
    assert CheckResult.objects.filter(pk=certified.pk).exists()


def test_it_never_edits_or_deletes_a_certificate_and_revokes_once(issued, users):
    issued.verdict = "FAIL"
    with pytest.raises(CertifiedEvidenceError):
        issued.save()
    with pytest.raises(REFUSED), transaction.atomic():
        Certificate.objects.filter(pk=issued.pk).delete()
    issued.refresh_from_db()
    issued.revoke_reason = "sneaky"
    with pytest.raises(CertifiedEvidenceError):
        issued.save(update_fields=["revoke_reason", "payload"])
    assert Certificate.objects.get(pk=issued.pk).verdict == "PASS WITH WAIVERS"


def test_it_keeps_evidence_of_a_revoked_certificate_frozen(issued, certified, users):
    from portal.certificates import services

    services.certificate_revoke(certificate=issued, reason="superseded", user=users["customer"])
    with pytest.raises(CertifiedEvidenceError):
        certified.save()


def test_it_keeps_the_audit_log_append_only(issued):
    event = AuditEvent.objects.first()
    event.detail = "rewritten"
    with pytest.raises(CertifiedEvidenceError):
        event.save()
    with pytest.raises(CertifiedEvidenceError), transaction.atomic():
        event.delete()


def test_it_refuses_bulk_updates_of_certified_evidence(certified):
    """QuerySet.update() and bulk_update() send no signals: the runs models' guard hook sees them."""
    with pytest.raises(CertifiedEvidenceError, match="bulk update"), transaction.atomic():
        CheckResult.objects.filter(pk=certified.pk).update(status="pass")
    with pytest.raises(CertifiedEvidenceError), transaction.atomic():
        Measurement.objects.filter(result=certified).update(value=0)
    certified.status = "pass"
    with pytest.raises(CertifiedEvidenceError), transaction.atomic():
        CheckResult.objects.bulk_update([certified], ["status"])
    certified.refresh_from_db()
    assert certified.status == "fail"
