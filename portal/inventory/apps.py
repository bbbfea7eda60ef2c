from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


def secret_key_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Settings no longer generate the key at import (portal/datadir.py): say how to make one."""
    from django.conf import settings

    try:
        if settings.SECRET_KEY:
            return []
    except ImproperlyConfigured:  # Django's answer to an empty SECRET_KEY
        pass
    return [
        checks.Error(
            "No secret key: KILN_SECRET_KEY is empty and KILN_DATA_DIR has no generated key.",
            hint="Run `kiln init` (or `manage.py kiln_init`; `make up` does) or set KILN_SECRET_KEY.",
            id="kiln.E001",
        )
    ]


class InventoryConfig(AppConfig):
    name = "portal.inventory"
    label = "inventory"
    verbose_name = "Inventory"

    def ready(self) -> None:
        checks.register(secret_key_check)
