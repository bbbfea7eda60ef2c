"""Chart URLs: figures per result, exports of the full series, run-level chart pages."""

from __future__ import annotations

from django.urls import path

from portal.charts import views

app_name = "charts"

urlpatterns = [
    path("clusters/<str:name>/capacity/", views.cluster_capacity, name="cluster_capacity"),
    path("results/<int:result_id>/charts/figure.json", views.result_figure, name="result_figure"),
    path("results/<int:result_id>/charts/ecc/", views.result_ecc, name="result_ecc"),
    path("results/<int:result_id>/series.csv", views.series_csv, name="series_csv"),
    path("results/<int:result_id>/series.json", views.series_json, name="series_json"),
    path("runs/<int:run_id>/charts/links/", views.run_links, name="run_links"),
    path("runs/<int:run_id>/charts/filesystem/", views.run_filesystem, name="run_filesystem"),
    path(
        "runs/<int:run_id>/charts/filesystem/figure.json",
        views.run_filesystem_figure,
        name="run_filesystem_figure",
    ),
    path("runs/<int:run_id>/charts/nccl/", views.run_nccl, name="run_nccl"),
    path("runs/<int:run_id>/charts/distribution/", views.run_distribution, name="run_distribution"),
    path("runs/<int:run_id>/charts/rack/", views.run_rack, name="run_rack"),
]
