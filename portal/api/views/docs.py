"""The API's documentation pages, served from the app (drf-spectacular-sidecar): no CDN.

Swagger UI runs under the portal's Content-Security-Policy unchanged: SpectacularSwaggerSplitView
serves its start-up script as a file (script-src 'self'), its bundle never evals, and its inline
<style> is allowed by style-src 'unsafe-inline'. Redoc builds its search index in a Web Worker made
from a blob: URL, so its page alone also allows `worker-src blob:`; the template drops the Google
Fonts links of drf-spectacular's own (Redoc falls back to the system fonts)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response


class RedocView(SpectacularRedocView):
    template_name = "api/redoc.html"

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().get(request, *args, **kwargs)
        policy = {**settings.KILN_CSP, "worker-src": ["'self'", "blob:"]}
        response["Content-Security-Policy"] = "; ".join(f"{k} {' '.join(v)}".strip() for k, v in policy.items())
        return response


class SchemaView(SpectacularAPIView):
    """The OpenAPI schema (YAML; `?format=json` for JSON). Its errors (401 without credentials) are
    JSON like every other API answer, not YAML."""

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(response, Response) and response.status_code >= 400:
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = "application/json"
        return super().finalize_response(request, response, *args, **kwargs)
