from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.db import DatabaseError


def credential_key_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """kiln.E101: endpoint credentials are stored but no usable key opens them. A malformed key is an
    error at once; a missing one only once a credential exists (a site without PDU/CDU endpoints
    needs none). When the database cannot be read (before migrate, or `check --deploy` run away from
    it) there is nothing to tell."""
    from portal.facility import credentials
    from portal.facility.models import CoolingLoop, Pdu

    problem = credentials.key_problem()
    if not problem:
        return []
    if credentials.key_configured():
        return [_error(problem)]
    try:
        stored = any(m.objects.exclude(credential_sealed="").exists() for m in (Pdu, CoolingLoop))
    except DatabaseError:
        return []
    return [_error(f"{problem}, and endpoint credentials are stored")] if stored else []


def _error(problem: str) -> checks.CheckMessage:
    return checks.Error(
        f"Facility credentials cannot be opened: {problem}.",
        hint="Run `kiln init` (`manage.py kiln_init`: it makes KILN_DATA_DIR/credential_key) or set "
        "KILN_CREDENTIAL_KEY to the key that sealed them.",
        id="kiln.E101",
    )


class FacilityConfig(AppConfig):
    name = "portal.facility"
    label = "facility"
    verbose_name = "Facility"

    def ready(self) -> None:
        checks.register(credential_key_check)
