from django.contrib import admin

from portal.inventory.models import Cluster, Node


class NodeInline(admin.TabularInline):
    model = Node
    extra = 0
    fields = ["hostname", "address", "rack", "position", "group", "expected_gpus", "host_key_fingerprint"]


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "customer", "site", "profile", "transport", "scheduler"]
    search_fields = ["name", "customer", "site"]
    inlines = [NodeInline]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["hostname", "cluster", "address", "rack", "position", "group", "serial"]
    list_filter = ["cluster"]
    search_fields = ["hostname", "address", "serial"]
