"""Cluster pages (included from portal/urls.py; the views live in portal/views.py, the node import
in portal/inventory/views.py)."""

from __future__ import annotations

from django.urls import path

from portal import views
from portal.inventory import views as inventory_views

app_name = "inventory"

urlpatterns = [
    path("clusters/", views.cluster_list, name="cluster_list"),
    path("clusters/<str:name>/", views.cluster_detail, name="cluster_detail"),
    path("clusters/<str:name>/nodes/import/", inventory_views.node_import, name="node_import"),
]
