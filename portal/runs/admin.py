from django.contrib import admin

from portal.runs.models import CheckResult, Measurement, Run


class MeasurementInline(admin.TabularInline):
    model = Measurement
    extra = 0


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "cluster", "status", "node_set", "created_at", "finished_at"]
    list_filter = ["status", "cluster"]


@admin.register(CheckResult)
class CheckResultAdmin(admin.ModelAdmin):
    list_display = ["id", "run", "node", "item_key", "status", "reason"]
    list_filter = ["status", "kind"]
    search_fields = ["node__hostname", "reason"]
    inlines = [MeasurementInline]
    list_select_related = ["node", "run"]


@admin.register(Measurement)
class MeasurementAdmin(admin.ModelAdmin):
    list_display = ["id", "result", "name", "value", "text", "unit", "gpu", "ok"]
    search_fields = ["name"]
