"""Admin registrations of the health app (read-mostly; pages are the primary UI). A cluster's
controller key path is set here, by a superuser; scheduler actions are records, never edited
(the command is rebuilt from server configuration when one runs)."""

from __future__ import annotations

from django.contrib import admin
from django.db import models

from portal.health.models import (
    AlertDelivery,
    ClusterHealthSettings,
    HealthTransition,
    NodeHealth,
    Schedule,
    SchedulerAction,
)
from portal.roles import ReadOnlyAdmin, SuperuserFieldsAdmin


@admin.register(ClusterHealthSettings)
class ClusterHealthSettingsAdmin(SuperuserFieldsAdmin, admin.ModelAdmin):
    list_display = ["cluster", "hook_mode", "controller_host", "webhook_format"]
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}  # as the settings page's form


@admin.register(SchedulerAction)
class SchedulerActionAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    list_display = ["id", "node", "action", "status", "dry_run", "created_at"]
    list_filter = ["status", "action"]


admin.site.register([NodeHealth, HealthTransition, Schedule, AlertDelivery])
