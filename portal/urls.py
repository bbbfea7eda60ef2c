from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from portal import views

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="cluster_list", permanent=False)),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("assets/plotly.min.js", views.plotly_js, name="plotly_js"),
    path("clusters/", views.cluster_list, name="cluster_list"),
    path("clusters/<str:name>/", views.cluster_detail, name="cluster_detail"),
    path("clusters/<str:name>/run/", views.run_start, name="run_start"),
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("runs/<int:run_id>/rerun/", views.run_rerun, name="run_rerun"),
    path("results/<int:result_id>/", views.result_detail, name="result_detail"),
    path("results/<int:result_id>/raw/<str:stream>/", views.result_raw_output, name="result_raw_output"),
    path("", include("portal.charts.urls")),
    path("", include("portal.history.urls")),
    path("", include("portal.certificates.urls")),
    path("", include("portal.health.urls")),
]
