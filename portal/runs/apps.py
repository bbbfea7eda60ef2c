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
        from celery.signals import beat_init, worker_ready, worker_shutdown

        from portal.runs import reaping

        # The reaper's threads: one in every worker process and one in beat (worker/ imports no app).
        worker_ready.connect(reaping.worker_ready, dispatch_uid="runs_reaper_worker_start")
        beat_init.connect(reaping.beat_init, dispatch_uid="runs_reaper_beat_start")
        worker_shutdown.connect(reaping.worker_shutdown, dispatch_uid="runs_reaper_stop")
        post_migrate.connect(_retention_schedule, sender=self, dispatch_uid="runs_retention_schedule")
        # Register the run tasks with the Celery app in every process (web, commands, tests), so
        # portal/runs/dispatch.py finds them by name and eager mode runs them in this process.
        from portal.runs import tasks  # noqa: F401  (models must be loaded first: not at module top)
