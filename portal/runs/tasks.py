"""The runs app's own Celery task: retention (the run tasks are the execution engine's,
portal/execution/tasks.py)."""

from __future__ import annotations

from worker.decorators import kiln_task


@kiln_task(name="kiln.retention")
def retention(self) -> dict[str, object]:
    """Periodic (PeriodicTask `kiln-retention`, daily): apply the retention policy once (idempotent)."""
    from portal.runs.retention import retention_apply

    return retention_apply().as_dict()
