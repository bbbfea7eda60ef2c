"""Health pages and the Prometheus endpoint (included from portal/urls.py)."""

from __future__ import annotations

from django.urls import path

from portal.health import views

urlpatterns = [
    path("health/", views.overview, name="health_overview"),
    path("health/schedules/", views.schedule_list, name="health_schedules"),
    path("health/schedules/new/", views.schedule_create, name="health_schedule_create"),
    path("health/schedules/<int:pk>/edit/", views.schedule_edit, name="health_schedule_edit"),
    path("health/schedules/<int:pk>/enable/", views.schedule_toggle, name="health_schedule_toggle"),
    path("health/schedules/<int:pk>/delete/", views.schedule_delete, name="health_schedule_delete"),
    path("health/clusters/<str:name>/", views.cluster_health, name="health_cluster"),
    path("health/clusters/<str:name>/settings/", views.health_settings, name="health_settings"),
    path("health/clusters/<str:name>/deliveries/", views.deliveries, name="health_deliveries"),
    path("metrics", views.metrics, name="metrics"),
]
