from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _retention_schedule(sender: AppConfig, **kwargs: object) -> None:
    from portal.runs.retention import retention_schedule_ensure

    retention_schedule_ensure()


class RunsConfig(AppConfig):
    name = "portal.runs"
    label = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        post_migrate.connect(_retention_schedule, sender=self, dispatch_uid="runs_retention_schedule")
        # Register the retention task with the Celery app in every process (web, commands, tests).
        from portal.runs import tasks  # noqa: F401  (models must be loaded first: not at module top)
