from django.apps import AppConfig


class ExecutionConfig(AppConfig):
    """The engine that executes runs: the run tasks, node and group execution, fan-out, the reaper.
    No models of its own: it works on the runs app's."""

    name = "portal.execution"
    label = "execution"
    verbose_name = "Run execution"

    def ready(self) -> None:
        from celery.signals import beat_init, worker_ready, worker_shutdown

        from portal.execution import reaping

        # The reaper's threads: one in every worker process and one in beat (worker/ imports no app).
        worker_ready.connect(reaping.worker_ready, dispatch_uid="runs_reaper_worker_start")
        beat_init.connect(reaping.beat_init, dispatch_uid="runs_reaper_beat_start")
        worker_shutdown.connect(reaping.worker_shutdown, dispatch_uid="runs_reaper_stop")
        # Register the run tasks with the Celery app in every process (web, commands, tests), so
        # portal/runs/dispatch.py finds them by name and eager mode runs them in this process.
        from portal.execution import tasks  # noqa: F401  (models must be loaded first: not at module top)
