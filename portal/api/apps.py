from __future__ import annotations

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "portal.api"
    label = "api"
    verbose_name = "REST API"
    default_auto_field = "django.db.models.BigAutoField"
    # The schema's token scheme (portal/api/schema.py) is registered by portal/api/urls.py, through
    # which every schema or docs view is reached: drf-spectacular's extensions and what they import
    # (DRF's test client, Django's test utilities) stay out of processes that serve no URL, such as
    # `kiln run` (0.2 s of CPU at each start on a 2-core machine).
