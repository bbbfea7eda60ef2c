"""Immutability of certified evidence.

A result cited by an issued certificate (revoked or not: the evidence of a revoked certificate
stays what it was) cannot be saved, nor can its measurements or series be saved, added or deleted,
through the admin, a form or code: pre_save / pre_delete raise CertifiedEvidenceError, a
PermissionDenied, so the admin and views answer 403 instead of a stack trace.

Deletes: Model.delete(), QuerySet.delete() and cascades (deleting a Run) all send pre_delete for
every row once a receiver is connected, so they are covered. QuerySet.update() and bulk_update()
send no signal: those pass through portal.runs.models.BULK_WRITE_GUARDS, where
`refuse_certified_bulk_write` refuses any that touches certified evidence. Certificates themselves:
only the revocation fields may change, once; they cannot be deleted. Audit events are append-only.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models.signals import pre_delete, pre_save
from django.dispatch import receiver

from portal.certificates.models import AuditEvent, Certificate, CertifiedResult, Waiver
from portal.runs.models import CheckResult, Measurement, Series


class CertifiedEvidenceError(PermissionDenied):
    """Refused: the row is evidence of an issued certificate (or is the certificate itself)."""


def _certified(result_id: int | None) -> str | None:
    if result_id is None:
        return None
    row = (
        CertifiedResult.objects.filter(result_id=result_id)
        .order_by("certificate_id")
        .values_list("certificate__number", flat=True)
        .first()
    )
    return row


@receiver(pre_save, sender=CheckResult, dispatch_uid="certified_result_save")
@receiver(pre_delete, sender=CheckResult, dispatch_uid="certified_result_delete")
def _guard_result(sender: type, instance: CheckResult, **kwargs: Any) -> None:
    number = _certified(instance.pk)
    if number:
        action = "deleted" if "origin" in kwargs else "edited"
        raise CertifiedEvidenceError(
            f"result #{instance.pk} is evidence of certificate {number}: it cannot be {action} (revoke the "
            "certificate and run the check again instead)"
        )


@receiver(pre_save, sender=Measurement, dispatch_uid="certified_measurement_save")
@receiver(pre_delete, sender=Measurement, dispatch_uid="certified_measurement_delete")
@receiver(pre_save, sender=Series, dispatch_uid="certified_series_save")
@receiver(pre_delete, sender=Series, dispatch_uid="certified_series_delete")
def _guard_evidence(sender: type, instance: Measurement | Series, **kwargs: Any) -> None:
    number = _certified(instance.result_id)
    if number:
        what = "measurement" if sender is Measurement else "series"
        action = "deleted" if "origin" in kwargs else ("edited" if instance.pk else "added")
        raise CertifiedEvidenceError(
            f"{what} {instance.name!r} of result #{instance.result_id} is evidence of certificate {number}: "
            f"it cannot be {action}"
        )


_REVOCATION_FIELDS = {"revoked_at", "revoked_by", "revoke_reason"}


@receiver(pre_save, sender=Certificate, dispatch_uid="certificate_save")
def _guard_certificate(sender: type, instance: Certificate, update_fields: Any = None, **kwargs: Any) -> None:
    if instance.pk is None:
        return
    stored = Certificate.objects.filter(pk=instance.pk).values("revoked_at").first()
    if stored is None:
        return
    if update_fields is None or not set(update_fields) <= _REVOCATION_FIELDS or stored["revoked_at"] is not None:
        raise CertifiedEvidenceError(
            f"certificate {instance.number} is sealed: it cannot be edited, only revoked once with a reason"
        )


@receiver(pre_delete, sender=Certificate, dispatch_uid="certificate_delete")
def _guard_certificate_delete(sender: type, instance: Certificate, **kwargs: Any) -> None:
    raise CertifiedEvidenceError(f"certificate {instance.number} cannot be deleted (revoke it instead)")


@receiver(pre_delete, sender=Waiver, dispatch_uid="waiver_delete")
def _guard_waiver(sender: type, instance: Waiver, **kwargs: Any) -> None:
    # Cited: a certificate of the campaign, issued after the waiver was granted, covers its result.
    cited = CertifiedResult.objects.filter(
        result_id=instance.result_id,
        certificate__campaign_id=instance.campaign_id,
        certificate__issued_at__gte=instance.granted_at,
    )
    if cited.exists():
        raise CertifiedEvidenceError("a waiver cited by an issued certificate cannot be deleted")


@receiver(pre_save, sender=AuditEvent, dispatch_uid="audit_save")
@receiver(pre_delete, sender=AuditEvent, dispatch_uid="audit_delete")
def _guard_audit(sender: type, instance: AuditEvent, **kwargs: Any) -> None:
    if instance.pk is not None:
        raise CertifiedEvidenceError("the audit log is append-only")


def refuse_certified_bulk_write(queryset: Any) -> None:
    """Guard for QuerySet.update()/bulk_update() of results, measurements and series (no signals)."""
    model = queryset.model
    if model is CheckResult:
        cited = CertifiedResult.objects.filter(result_id__in=queryset.values("pk"))
    elif model in (Measurement, Series):
        cited = CertifiedResult.objects.filter(result_id__in=queryset.values("result_id"))
    else:
        return
    number = cited.order_by("certificate_id").values_list("certificate__number", flat=True).first()
    if number:
        raise CertifiedEvidenceError(
            f"a bulk update would change evidence of certificate {number}: refused (revoke the certificate "
            "and run the check again instead)"
        )
