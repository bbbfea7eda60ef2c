"""Admin of runs and results: read-only, and only a superuser deletes (roles.EvidenceAdmin). A run's
plan snapshot is what its checks execute (and a re-run copies it), and results are evidence; both are
written by the services only."""

from __future__ import annotations

from django.contrib import admin

from portal.roles import EvidenceAdmin
from portal.runs.models import CheckResult, Measurement, Run


class MeasurementInline(EvidenceAdmin, admin.TabularInline):
    model = Measurement
    extra = 0


@admin.register(Run)
class RunAdmin(EvidenceAdmin, admin.ModelAdmin):
    list_display = ["id", "cluster", "status", "node_set", "created_at", "finished_at"]
    list_filter = ["status", "cluster"]


@admin.register(CheckResult)
class CheckResultAdmin(EvidenceAdmin, admin.ModelAdmin):
    list_display = ["id", "run", "node", "item_key", "status", "reason"]
    list_filter = ["status", "kind"]
    search_fields = ["node__hostname", "reason"]
    inlines = [MeasurementInline]
    list_select_related = ["node", "run"]


@admin.register(Measurement)
class MeasurementAdmin(EvidenceAdmin, admin.ModelAdmin):
    list_display = ["id", "result", "name", "value", "text", "unit", "gpu", "ok"]
    search_fields = ["name"]
