"""The audit log is a hash chain, and a certificate seals its head: what a role that can switch the
triggers off (the tables' owner, here the test's superuser) deletes or alters still shows, in
`kiln verify` (exit 1, tampered) and `kiln audit verify` (exit 1). Runs on PostgreSQL."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from portal.certificates import auditchain, services
from portal.certificates.models import AuditEvent, Certificate

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL (DATABASE_URL)")


def _kiln(*args: str) -> tuple[int, dict]:
    out = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command(*args, "--json", stdout=out)
    return int(exited.value.code or 0), json.loads(out.getvalue())


def _verify(certificate: Certificate, tmp_path: Path) -> tuple[int, dict]:
    path = tmp_path / "certificate.pdf"
    path.write_bytes(bytes(certificate.pdf))
    return _kiln("kiln_verify", str(path))


def _as_owner(sql: str, params: list | None = None) -> None:
    """What a superuser (the test's role) can do and the runtime role cannot: switch every trigger
    off around a write."""
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(sql, params or [])
        cursor.execute("SET session_replication_role = origin")


@pytest.mark.django_db
def test_the_events_link_and_the_certificate_seals_the_head(issued: Certificate, tmp_path: Path) -> None:
    events = list(AuditEvent.objects.order_by("id"))
    assert len(events) >= 4 and events[0].prev_sha256 == ""
    assert all(b.prev_sha256 == a.sha256 != "" for a, b in zip(events, events[1:], strict=False))
    sealed = json.loads(issued.payload)["audit_head"]
    issued_event = AuditEvent.objects.get(action=auditchain.ISSUED)
    assert sealed["id"] < issued_event.pk and AuditEvent.objects.get(pk=sealed["id"]).sha256 == sealed["sha256"]
    code, answer = _kiln("kiln_audit", "verify")
    assert code == 0 and answer["ok"] and answer["head"]["id"] == events[-1].pk
    assert _verify(issued, tmp_path)[0] == 0


@pytest.mark.django_db
def test_a_revocation_deleted_as_the_owner_is_found(issued: Certificate, users, tmp_path: Path) -> None:
    services.certificate_revoke(certificate=issued, reason="PSU recall", user=users["vendor"])
    assert _verify(issued, tmp_path)[0] == 4
    _as_owner("DELETE FROM certificates_revocation WHERE certificate_id = %s", [issued.pk])
    code, answer = _verify(issued, tmp_path)
    assert code == 1 and answer["status"] == "tampered", answer
    assert f"certificate {issued.number} was revoked" in answer["detail"] and "missing" in answer["detail"]
    code, report = _kiln("kiln_audit", "verify")
    assert code == 1 and not report["ok"]
    assert any(f"{issued.number} was revoked" in p and "deleted" in p for p in report["problems"]), report


@pytest.mark.django_db
def test_a_revocation_and_its_event_deleted_break_the_chain(issued: Certificate, users, tmp_path: Path) -> None:
    services.certificate_revoke(certificate=issued, reason="PSU recall", user=users["vendor"])
    services.audit_record(campaign=issued.campaign, user=None, action="note", detail="after it: the chain goes on")
    revoked = AuditEvent.objects.get(action=auditchain.REVOKED)
    _as_owner("DELETE FROM certificates_revocation WHERE certificate_id = %s", [issued.pk])
    _as_owner("DELETE FROM certificates_auditevent WHERE id = %s", [revoked.pk])
    code, report = _kiln("kiln_audit", "verify")
    assert code == 1 and any("does not follow" in p for p in report["problems"]), report
    assert _verify(issued, tmp_path)[0] == 1


@pytest.mark.django_db
def test_an_event_altered_or_the_sealed_head_deleted_is_found(issued: Certificate, tmp_path: Path) -> None:
    signed = AuditEvent.objects.filter(action="signed").order_by("id").first()
    assert signed is not None
    _as_owner("UPDATE certificates_auditevent SET detail = 'nothing to see' WHERE id = %s", [signed.pk])
    code, report = _kiln("kiln_audit", "verify")
    assert code == 1 and any(f"#{signed.pk} (signed) was altered" in p for p in report["problems"]), report
    code, answer = _verify(issued, tmp_path)
    assert code == 1 and "audit log was tampered with" in answer["detail"]


@pytest.mark.django_db
def test_the_newest_events_deleted_up_to_the_sealed_head_are_found(issued: Certificate, tmp_path: Path) -> None:
    """The chain after the deletion still links; the head the certificate sealed is gone."""
    sealed = json.loads(issued.payload)["audit_head"]
    _as_owner("DELETE FROM certificates_auditevent WHERE id >= %s", [sealed["id"]])
    code, answer = _verify(issued, tmp_path)
    assert code == 1 and f"audit event #{sealed['id']}" in answer["detail"] and "missing" in answer["detail"]


@pytest.mark.django_db
def test_a_certificate_row_deleted_as_the_owner_is_found(issued: Certificate, tmp_path: Path) -> None:
    """With its row gone, a certificate of this site's own key is judged against the audit log,
    which still records its issue."""
    path = tmp_path / "certificate.pdf"
    path.write_bytes(bytes(issued.pdf))
    assert _kiln("kiln_verify", str(path))[0] == 0
    _as_owner("DELETE FROM certificates_certifiedresult WHERE certificate_id = %s", [issued.pk])
    _as_owner("UPDATE certificates_signature SET certificate_id = NULL WHERE certificate_id = %s", [issued.pk])
    _as_owner("DELETE FROM certificates_certificate WHERE id = %s", [issued.pk])
    code, answer = _kiln("kiln_verify", str(path))
    assert code == 1 and answer["status"] == "tampered", answer
    assert f"certificate {issued.number} was issued" in answer["detail"] and "missing" in answer["detail"]
