"""After handover: node health state, scheduled sweeps, alerts, scheduler hooks, metrics."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate, post_save


class HealthConfig(AppConfig):
    name = "portal.health"
    label = "health"
    verbose_name = "Health"

    def ready(self) -> None:
        from celery.signals import worker_ready, worker_shutdown

        from portal.health import signals

        # Through the functions below: the beater (and the health services it imports) is loaded in
        # workers only, not by every command.
        worker_ready.connect(_beat_worker_ready, dispatch_uid="health_worker_beat_start")
        worker_shutdown.connect(_beat_worker_shutdown, dispatch_uid="health_worker_beat_stop")

        post_save.connect(signals.run_saved, sender="runs.Run", dispatch_uid="health_run_saved")
        post_migrate.connect(signals.migrated, sender=self, dispatch_uid="health_reaper_schedule")
        # Register the health tasks in every process: services and signals send them by name (eager
        # mode runs them in this process).
        from portal.health import tasks  # noqa: F401


def _beat_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    from portal.health import beats

    beats.worker_ready(sender, **kwargs)


def _beat_worker_shutdown(**kwargs: Any) -> None:
    from portal.health import beats

    beats.worker_shutdown(**kwargs)
