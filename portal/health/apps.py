"""After handover: node health state, scheduled sweeps, alerts, scheduler hooks, reaper, metrics."""

from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate, post_save


class HealthConfig(AppConfig):
    name = "portal.health"
    label = "health"
    verbose_name = "Health"

    def ready(self) -> None:
        from portal.health import signals

        post_save.connect(signals.run_saved, sender="runs.Run", dispatch_uid="health_run_saved")
        post_migrate.connect(signals.migrated, sender=self, dispatch_uid="health_reaper_schedule")
