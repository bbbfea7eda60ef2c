from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate, pre_migrate


def _sides_ensure(sender: AppConfig, **kwargs: object) -> None:
    """The two signing sides are Django groups; an approver belongs to exactly one of them."""
    from django.contrib.auth.models import Group

    from portal.certificates.models import Side

    for side in Side.values:
        Group.objects.get_or_create(name=side)


def _triggers_ensure(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    """SQLite drops a table's triggers when a migration rebuilds it: put them back after every migrate."""
    from django.db import connections

    from portal.certificates import immutability

    immutability.install(connections[using])


def _triggers_lift(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    """SQLite only: a migration that rebuilds a table would trip over triggers that name it."""
    from django.db import connections

    from portal.certificates import immutability

    connection = connections[using]
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            tables = set(connection.introspection.table_names(cursor))
        if "runs_checkresult" in tables:
            immutability.uninstall(connection)


class CertificatesConfig(AppConfig):
    name = "portal.certificates"
    label = "certificates"
    verbose_name = "Certificates"

    def ready(self) -> None:
        from portal import dbroles
        from portal.runs import partitions

        # Grants first: _sides_ensure writes through the default (runtime) connection.
        pre_migrate.connect(dbroles.on_migrate, sender=self, dispatch_uid="kiln_runtime_grant_pre")
        post_migrate.connect(dbroles.on_migrate, sender=self, dispatch_uid="kiln_runtime_grant_post")
        post_migrate.connect(partitions.partitions_ahead, sender=self, dispatch_uid="kiln_partitions_ahead")
        post_migrate.connect(_sides_ensure, sender=self)
        pre_migrate.connect(_triggers_lift, sender=self)
        post_migrate.connect(_triggers_ensure, sender=self)
        # Register the issuing task in every process, so that services send it by name (eager mode
        # runs it in this process).
        from portal.certificates import tasks  # noqa: F401  (models must be loaded first: not at module top)
