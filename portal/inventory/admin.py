"""Admin of clusters and nodes. Operators (when a superuser made them staff) add and change them,
but `transport` and `ssh_key_path` (what runs on a Kiln host, which of its files is read) are
superusers' (portal/roles.py SUPERUSER_FIELDS); a node's `local_env` is set by server code only
and appears nowhere here."""

from __future__ import annotations

from django.contrib import admin

from portal.inventory.models import Cluster, Node
from portal.roles import SuperuserFieldsAdmin


class NodeInline(admin.TabularInline):
    model = Node
    extra = 0
    fields = ["hostname", "address", "ssh_port", "rack", "position", "group", "expected_gpus", "host_key_fingerprint"]


@admin.register(Cluster)
class ClusterAdmin(SuperuserFieldsAdmin, admin.ModelAdmin):
    list_display = ["name", "customer", "site", "profile", "transport", "scheduler"]
    search_fields = ["name", "customer", "site"]
    inlines = [NodeInline]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["hostname", "cluster", "address", "rack", "position", "group", "serial"]
    list_filter = ["cluster"]
    search_fields = ["hostname", "address", "serial"]
