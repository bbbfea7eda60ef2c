"""Read-only admin: campaigns and certificates change through the portal's services, never here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from portal.certificates.models import AuditEvent, Campaign, Certificate, Revocation, Waiver


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Campaign)
class CampaignAdmin(ReadOnlyAdmin):
    list_display = ["id", "name", "cluster", "plan", "created_at"]


@admin.register(Certificate)
class CertificateAdmin(ReadOnlyAdmin):
    list_display = ["number", "campaign", "verdict", "issued_at", "revoked"]
    list_select_related = ["campaign", "revocation"]
    exclude = ["pdf", "payload"]

    @admin.display(boolean=True)
    def revoked(self, obj: Certificate) -> bool:
        return obj.revoked


@admin.register(Revocation)
class RevocationAdmin(ReadOnlyAdmin):
    list_display = ["certificate", "revoked_at", "username", "reason"]


@admin.register(Waiver)
class WaiverAdmin(ReadOnlyAdmin):
    list_display = ["campaign", "node", "item_key", "granted_by", "granted_at"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "campaign", "username", "action"]
