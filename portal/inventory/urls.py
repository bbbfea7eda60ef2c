"""Cluster pages (included from portal/urls.py; the list and the cluster page live in portal/views.py,
the operators' forms and the node import in portal/inventory/views.py).

No form's path can be a cluster's or a node's page: `add-cluster/` is outside `clusters/`, and
`add-nodes/` and `edit/` are segments no `clusters/<name>/nodes/<hostname>/` page has."""

from __future__ import annotations

from django.urls import path

from portal import views
from portal.inventory import views as inventory_views

app_name = "inventory"

urlpatterns = [
    path("clusters/", views.cluster_list, name="cluster_list"),
    path("add-cluster/", inventory_views.cluster_create, name="cluster_create"),
    path("clusters/<str:name>/", views.cluster_detail, name="cluster_detail"),
    path("clusters/<str:name>/edit/", inventory_views.cluster_edit, name="cluster_edit"),
    path("clusters/<str:name>/add-nodes/", inventory_views.node_add, name="node_add"),
    path("clusters/<str:name>/nodes/<str:hostname>/edit/", inventory_views.node_edit, name="node_edit"),
    path("clusters/<str:name>/nodes/import/", inventory_views.node_import, name="node_import"),
]
