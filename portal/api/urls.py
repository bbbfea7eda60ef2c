"""The REST API under /api/v1/ (included from portal/urls.py), its OpenAPI schema and docs pages,
and the API tokens page.

Every API URL but the two documentation pages is exempt from LoginRequiredMiddleware: the API
answers 401/403 in JSON itself (DRF's authentication and portal/api/permissions.py), never with a
redirect to the login page."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.urls import URLPattern, URLResolver, include, path, re_path
from drf_spectacular.views import SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from portal.api import schema  # noqa: F401  (registers the token scheme with drf-spectacular)
from portal.api.exceptions import not_found
from portal.api.views import docs, evidence, inventory, runs, tokens


class Router(DefaultRouter):
    """Django path converters, not regexes: ids are `<int:pk>` (a viewset with slugs says
    `lookup_value_converter = "slug"`)."""

    include_format_suffixes = False  # one URL per resource: no `.json` twins in the schema

    def __init__(self) -> None:
        super().__init__(use_regex_path=False)
        self._default_value_pattern = "int"


router = Router()
router.register("clusters", inventory.ClusterViewSet, basename="cluster")
router.register("nodes", inventory.NodeViewSet, basename="node")
router.register("plans", runs.PlanViewSet, basename="plan")
router.register("checks", runs.CheckDefinitionViewSet, basename="check")
router.register("runs", runs.RunViewSet, basename="run")
router.register("results", runs.ResultViewSet, basename="result")
router.register("series", runs.SeriesViewSet, basename="series")
router.register("campaigns", evidence.CampaignViewSet, basename="campaign")
router.register("certificates", evidence.CertificateViewSet, basename="certificate")
router.register("health", evidence.NodeHealthViewSet, basename="health")
router.register("health-transitions", evidence.HealthTransitionViewSet, basename="health-transition")
router.register("schedules", evidence.ScheduleViewSet, basename="schedule")
router.register("tokens", tokens.TokenViewSet, basename="token")


def _page(view: Any) -> Any:
    """DRF marks its views login_not_required; a documentation page is a page: login first."""
    view.login_required = True
    return view


def _exempt(patterns: list[URLPattern | URLResolver]) -> list[URLPattern | URLResolver]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            _exempt(pattern.url_patterns)
        else:
            login_not_required(pattern.callback)
    return patterns


api_v1 = [
    # The documentation pages are for browsers: the login page first, like every other page.
    path("docs/", _page(SpectacularSwaggerSplitView.as_view(url_name="api:schema")), name="docs"),
    path("redoc/", _page(docs.RedocView.as_view(url_name="api:schema")), name="redoc"),
    *_exempt(
        [
            path("schema/", docs.SchemaView.as_view(), name="schema"),
            path("", include(router.urls)),
            re_path(r"^.*$", not_found),
        ]
    ),
]

app_name = "api"

urlpatterns = [
    path("api/v1/", include(api_v1)),
    re_path(r"^api/.*$", login_not_required(not_found)),
    path("account/tokens/", tokens.token_page, name="tokens"),
    path("account/tokens/<str:prefix>/revoke/", tokens.token_revoke_page, name="token_revoke"),
]
