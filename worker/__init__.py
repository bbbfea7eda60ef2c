"""Kiln's Celery worker: `celery -A worker worker`."""

from worker.celery import app

__all__ = ["app"]
