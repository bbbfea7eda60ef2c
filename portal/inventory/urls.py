"""Cluster pages (included from portal/urls.py; the views live in portal/views.py)."""

from __future__ import annotations

from django.urls import path

from portal import views

app_name = "inventory"

urlpatterns = [
    path("clusters/", views.cluster_list, name="cluster_list"),
    path("clusters/<str:name>/", views.cluster_detail, name="cluster_detail"),
]
