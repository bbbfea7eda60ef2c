from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from portal.api.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are created where their secret can be shown once (the API tokens page, kiln_token);
    here they are listed, and revoked by setting revoked_at."""

    list_display = ("prefix", "name", "user", "created_at", "last_used_at", "expires_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("prefix", "name", "user__username")
    readonly_fields = ("user", "name", "prefix", "secret_sha256", "created_at", "last_used_at")

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False
