from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class ExecutionConfig(AppConfig):
    """The engine that executes runs: the run tasks, node and group execution, fan-out, the reaper.
    No models of its own: it works on the runs app's."""

    name = "portal.execution"
    label = "execution"
    verbose_name = "Run execution"

    def ready(self) -> None:
        from celery.signals import beat_init, worker_ready, worker_shutdown

        # The reaper's threads: one in every worker process and one in beat (worker/ imports no app).
        # Connected through the functions below, which import the reaper (and with it the SSH
        # transport, fabric and paramiko) only in those processes: `kiln run` never needs them.
        worker_ready.connect(_reaper_worker_ready, dispatch_uid="runs_reaper_worker_start")
        beat_init.connect(_reaper_beat_init, dispatch_uid="runs_reaper_beat_start")
        worker_shutdown.connect(_reaper_worker_shutdown, dispatch_uid="runs_reaper_stop")
        # Register the run tasks with the Celery app in every process (web, commands, tests), so
        # portal/runs/dispatch.py finds them by name and eager mode runs them in this process.
        from portal.execution import tasks  # noqa: F401  (models must be loaded first: not at module top)


def _reaper_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    from portal.execution import reaping

    reaping.worker_ready(sender, **kwargs)


def _reaper_beat_init(sender: Any = None, **kwargs: Any) -> None:
    from portal.execution import reaping

    reaping.beat_init(sender, **kwargs)


def _reaper_worker_shutdown(**kwargs: Any) -> None:
    from portal.execution import reaping

    reaping.worker_shutdown(**kwargs)
