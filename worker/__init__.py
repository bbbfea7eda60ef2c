"""Kiln's Celery worker: `celery -A worker worker` (Celery finds the app in worker/celery.py)."""
