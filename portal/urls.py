from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from portal.charts import views as chart_views
from portal.inventory import urls as inventory_urls
from portal.runs import urls as run_urls

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="inventory:cluster_list", permanent=False)),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("assets/plotly.min.js", chart_views.plotly_js, name="plotly_js"),
    path("", include(([*run_urls.cluster_pages, *inventory_urls.urlpatterns], "inventory"))),
    path("", include("portal.runs.urls")),
    path("", include("portal.charts.urls")),
    path("", include("portal.history.urls")),
    path("", include("portal.certificates.urls")),
    path("", include("portal.health.urls")),
    path("", include("portal.facility.urls")),
    path("", include("portal.api.urls")),
]
