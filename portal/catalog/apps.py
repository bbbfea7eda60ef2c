from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _catalog_seed(sender: AppConfig, **kwargs: object) -> None:
    from portal.catalog.services import builtin_catalog_ensure

    builtin_catalog_ensure()


class CatalogConfig(AppConfig):
    name = "portal.catalog"
    label = "catalog"
    verbose_name = "Check catalog"

    def ready(self) -> None:
        # After every migrate: the built-in checks and plans exist, with stable slugs.
        post_migrate.connect(_catalog_seed, sender=self, dispatch_uid="catalog_seed")
