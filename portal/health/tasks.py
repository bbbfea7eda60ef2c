"""Celery tasks of the health app (discovered by worker/celery.py). Use worker.decorators.kiln_task."""
