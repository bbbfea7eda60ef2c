"""The Celery app. Configuration comes from Django settings (CELERY_* names)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("kiln")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,  # long tasks: do not hoard messages a sibling worker could run
    task_track_started=True,
    broker_connection_retry_on_startup=True,
)
app.autodiscover_tasks(["worker", "portal.health", "portal.certificates"], related_name="tasks", force=True)
