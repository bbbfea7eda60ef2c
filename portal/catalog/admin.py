"""Admin of check definitions and plans: superusers only. A check's params name programs and paths
(gpu_burn_path, dcgmi_path, the NCCL binary, mpirun's launcher_args, fio's directory) that run on
the nodes, so only a superuser chooses them (docs/security.md); the view permission reads them."""

from __future__ import annotations

from django.contrib import admin

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.roles import SuperuserOnlyAdmin


@admin.register(CheckDefinition)
class CheckDefinitionAdmin(SuperuserOnlyAdmin, admin.ModelAdmin):
    list_display = ["slug", "name", "kind", "builtin"]
    search_fields = ["slug", "name"]


class TestPlanItemInline(SuperuserOnlyAdmin, admin.TabularInline):
    model = TestPlanItem
    extra = 0


@admin.register(TestPlan)
class TestPlanAdmin(SuperuserOnlyAdmin, admin.ModelAdmin):
    list_display = ["slug", "name", "builtin"]
    inlines = [TestPlanItemInline]
