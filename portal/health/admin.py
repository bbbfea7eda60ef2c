"""Admin registrations of the health app (read-mostly; pages are the primary UI)."""

from __future__ import annotations

from django.contrib import admin

from portal.health.models import (
    AlertDelivery,
    ClusterHealthSettings,
    HealthTransition,
    NodeHealth,
    Schedule,
    SchedulerAction,
)

admin.site.register([ClusterHealthSettings, NodeHealth, HealthTransition, Schedule, AlertDelivery, SchedulerAction])
