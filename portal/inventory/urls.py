"""The operators' cluster forms and the node import (included from portal/urls.py, in the
"inventory" namespace together with the cluster list and the cluster page, whose views show runs
and live in portal/runs/views.py).

No form's path can be a cluster's or a node's page: `add-cluster/` is outside `clusters/`, and
`add-nodes/` and `edit/` are segments no `clusters/<name>/nodes/<hostname>/` page has."""

from __future__ import annotations

from django.urls import path

from portal.inventory import views as inventory_views

app_name = "inventory"

urlpatterns = [
    path("add-cluster/", inventory_views.cluster_create, name="cluster_create"),
    path("clusters/<str:name>/edit/", inventory_views.cluster_edit, name="cluster_edit"),
    path("clusters/<str:name>/add-nodes/", inventory_views.node_add, name="node_add"),
    path("clusters/<str:name>/nodes/<str:hostname>/edit/", inventory_views.node_edit, name="node_edit"),
    path("clusters/<str:name>/nodes/import/", inventory_views.node_import, name="node_import"),
]
