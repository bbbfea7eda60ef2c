"""The one task decorator of the project. Bare `shared_task` / `app.task` is not used elsewhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.celery import app


def kiln_task(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """A Celery task that is safe to run twice: acks after completion, re-queued if its worker dies.

    Tasks take primary keys only, and claim their rows with a conditional UPDATE, so a redelivered
    message finds the work already done (or resumes what it had claimed) instead of repeating it.
    """
    defaults: dict[str, Any] = {"acks_late": True, "reject_on_worker_lost": True, "bind": True}
    defaults.update(options)

    def wrap(inner: Callable[..., Any]) -> Any:
        return app.task(**defaults)(inner)

    return wrap(func) if func is not None else wrap
