"""Health pages and the Prometheus endpoint (included from portal/urls.py)."""

from __future__ import annotations

from django.urls import path

from portal.health import views

app_name = "health"

urlpatterns = [
    path("health/", views.overview, name="overview"),
    path("health/schedules/", views.schedule_list, name="schedules"),
    path("health/schedules/new/", views.schedule_create, name="schedule_create"),
    path("health/schedules/<int:pk>/edit/", views.schedule_edit, name="schedule_edit"),
    path("health/schedules/<int:pk>/enable/", views.schedule_toggle, name="schedule_toggle"),
    path("health/schedules/<int:pk>/delete/", views.schedule_delete, name="schedule_delete"),
    path("health/clusters/<str:name>/", views.cluster_health, name="cluster"),
    path("health/clusters/<str:name>/settings/", views.health_settings, name="settings"),
    path("health/clusters/<str:name>/deliveries/", views.deliveries, name="deliveries"),
    path("metrics", views.metrics, name="metrics"),
]
