from __future__ import annotations

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "portal.api"
    label = "api"
    verbose_name = "REST API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from portal.api import schema  # noqa: F401  (registers the token scheme with drf-spectacular)
