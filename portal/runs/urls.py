"""Run and result pages (included from portal/urls.py)."""

from __future__ import annotations

from django.urls import path

from portal.runs import triage_views, views

app_name = "runs"

# The cluster list and the cluster page show runs and verdicts, so their views live here (a cluster
# knows nothing of runs); portal/urls.py serves them in the "inventory" namespace with the forms.
cluster_pages = [
    path("clusters/", views.cluster_list, name="cluster_list"),
    path("clusters/<str:name>/", views.cluster_detail, name="cluster_detail"),
]

urlpatterns = [
    path("clusters/<str:name>/run/", views.run_start, name="run_start"),
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("runs/<int:run_id>/rerun/", views.run_rerun, name="run_rerun"),
    path("runs/<int:run_id>/triage.csv", triage_views.run_triage_csv, name="run_triage_csv"),
    path("runs/<int:run_id>/rma.txt", triage_views.run_triage_rma, name="run_triage_rma"),
    path("results/<int:result_id>/", views.result_detail, name="result_detail"),
    path("results/<int:result_id>/raw/<str:stream>/", views.result_raw_output, name="result_raw_output"),
]
