"""Run and result pages (included from portal/urls.py; the views live in portal/views.py)."""

from __future__ import annotations

from django.urls import path

from portal import views
from portal.runs import triage_views

app_name = "runs"

urlpatterns = [
    path("clusters/<str:name>/run/", views.run_start, name="run_start"),
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("runs/<int:run_id>/rerun/", views.run_rerun, name="run_rerun"),
    path("runs/<int:run_id>/triage.csv", triage_views.run_triage_csv, name="run_triage_csv"),
    path("runs/<int:run_id>/rma.txt", triage_views.run_triage_rma, name="run_triage_rma"),
    path("campaigns/<int:campaign_id>/triage.csv", triage_views.campaign_triage_csv, name="campaign_triage_csv"),
    path("campaigns/<int:campaign_id>/rma.txt", triage_views.campaign_triage_rma, name="campaign_triage_rma"),
    path("results/<int:result_id>/", views.result_detail, name="result_detail"),
    path("results/<int:result_id>/raw/<str:stream>/", views.result_raw_output, name="result_raw_output"),
]
