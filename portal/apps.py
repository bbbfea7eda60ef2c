"""The portal's core app: the role groups, the templates every app extends (portal/templates/:
base.html, the breadcrumbs, the login pages) and the user command (kiln_user)."""

from django.apps import AppConfig, apps
from django.db.models.signals import post_migrate


def _roles_seed(sender: AppConfig, **kwargs: object) -> None:
    from portal.roles import roles_ensure

    # Once per migrate, for the last app with models: by then every model's permissions exist.
    with_models = [config for config in apps.get_app_configs() if config.models_module is not None]
    if with_models and sender is with_models[-1]:
        roles_ensure()


class CoreConfig(AppConfig):
    name = "portal"
    label = "core"
    verbose_name = "Kiln"

    def ready(self) -> None:
        # Role groups exist after every migrate, with stable names and their model permissions.
        post_migrate.connect(_roles_seed, dispatch_uid="core_roles_seed")
