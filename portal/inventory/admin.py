"""Admin of clusters and nodes. Operators (when a superuser made them staff) add and change them,
but `transport` and `ssh_key_path` (what runs on a Kiln host, which of its files is read) are
superusers' (portal/roles.py SUPERUSER_FIELDS); a node's `local_env` is set by server code only
and appears nowhere here."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from portal.inventory.models import Cluster, Node
from portal.roles import SuperuserFieldsAdmin

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class _NodeTotal(TypedDict):
    """What ClusterAdmin.get_queryset annotates on each cluster."""

    node_total: int


def nodes_url(cluster: Cluster) -> str:
    """The Node changelist filtered to one cluster (its `list_filter`), paged by the admin."""
    return f"{reverse('admin:inventory_node_changelist')}?{urlencode({'cluster__id__exact': cluster.pk})}"


@admin.register(Cluster)
class ClusterAdmin(SuperuserFieldsAdmin, admin.ModelAdmin):
    """A cluster has up to thousands of nodes: they are not inlined here (one form of 1,250 rows),
    but linked, as NetBox links a site's devices, to the Node changelist filtered to the cluster."""

    list_display = ["name", "customer", "site", "queue", "profile", "transport", "scheduler", "node_count"]
    list_filter = ["queue"]
    search_fields = ["name", "customer", "site", "queue"]
    readonly_fields = ["nodes"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Cluster]:
        return super().get_queryset(request).annotate(node_total=Count("nodes"))

    @admin.display(description="nodes", ordering="node_total")
    def node_count(self, obj: WithAnnotations[Cluster, _NodeTotal]) -> str:
        return format_html('<a href="{}">{}</a>', nodes_url(obj), obj.node_total)

    @admin.display(description="nodes")
    def nodes(self, obj: Cluster) -> str:
        if obj.pk is None:
            return "Add nodes once the cluster is saved (Nodes, or kiln nodes add)."
        return format_html('<a href="{}">{} nodes</a>', nodes_url(obj), obj.nodes.count())


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["hostname", "cluster", "address", "rack", "position", "group", "serial"]
    list_filter = ["cluster"]
    list_select_related = ["cluster"]
    search_fields = ["hostname", "address", "serial"]
