"""Facility pages (included from portal/urls.py)."""

from __future__ import annotations

from django.urls import path

from portal.facility import views

app_name = "facility"

urlpatterns = [
    path("facility/clusters/<str:name>/", views.facility_page, name="page"),
    path("facility/clusters/<str:name>/export.csv", views.export_csv, name="export"),
    path("facility/clusters/<str:name>/import/", views.import_csv, name="import"),
    path("facility/clusters/<str:name>/<str:kind>/new/", views.item_edit, name="item_new"),
    path("facility/clusters/<str:name>/<str:kind>/<int:pk>/edit/", views.item_edit, name="item_edit"),
    path("facility/clusters/<str:name>/<str:kind>/<int:pk>/delete/", views.item_delete, name="item_delete"),
    path("facility/clusters/<str:name>/nodes/<str:hostname>/feeds/", views.node_feeds, name="node_feeds"),
]
