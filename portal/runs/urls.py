"""Run and result pages (included from portal/urls.py; the views live in portal/views.py)."""

from __future__ import annotations

from django.urls import path

from portal import views

app_name = "runs"

urlpatterns = [
    path("clusters/<str:name>/run/", views.run_start, name="run_start"),
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("runs/<int:run_id>/rerun/", views.run_rerun, name="run_rerun"),
    path("results/<int:result_id>/", views.result_detail, name="result_detail"),
    path("results/<int:result_id>/raw/<str:stream>/", views.result_raw_output, name="result_raw_output"),
]
