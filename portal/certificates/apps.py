from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _sides_ensure(sender: AppConfig, **kwargs: object) -> None:
    """The two signing sides are Django groups; an approver belongs to exactly one of them."""
    from django.contrib.auth.models import Group

    from portal.certificates.models import SIDES

    for side, _ in SIDES:
        Group.objects.get_or_create(name=side)


class CertificatesConfig(AppConfig):
    name = "portal.certificates"
    label = "certificates"
    verbose_name = "Certificates"

    def ready(self) -> None:
        from portal.certificates import signals  # connects the immutability guards
        from portal.runs.models import BULK_WRITE_GUARDS

        if signals.refuse_certified_bulk_write not in BULK_WRITE_GUARDS:
            BULK_WRITE_GUARDS.append(signals.refuse_certified_bulk_write)

        post_migrate.connect(_sides_ensure, sender=self)
