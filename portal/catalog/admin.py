from django.contrib import admin

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem


@admin.register(CheckDefinition)
class CheckDefinitionAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "kind", "builtin"]
    search_fields = ["slug", "name"]


class TestPlanItemInline(admin.TabularInline):
    model = TestPlanItem
    extra = 0


@admin.register(TestPlan)
class TestPlanAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "builtin"]
    inlines = [TestPlanItemInline]
