"""Kiln pages: history (views, selectors, urls). Not an app of its own: it reads the runs app's models."""

from __future__ import annotations

from django.urls import path

from portal.history import views

app_name = "history"

urlpatterns = [
    path("clusters/<str:name>/runs/", views.cluster_runs, name="cluster_runs"),
    path("clusters/<str:name>/nodes/<str:hostname>/", views.node_detail, name="node_detail"),
    path("runs/compare/", views.run_compare, name="run_compare"),
    path("runs/<int:run_id>/results.csv", views.run_results_export, {"fmt": "csv"}, name="run_results_csv"),
    path("runs/<int:run_id>/results.json", views.run_results_export, {"fmt": "json"}, name="run_results_json"),
    path("runs/<int:run_id>/measurements.csv", views.run_measurements_export, name="run_measurements_csv"),
    path("results/", views.result_search, name="result_search"),
]
