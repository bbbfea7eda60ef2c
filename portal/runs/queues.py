"""Which Celery queue a run's work goes to, and which queues some worker serves.

A cluster names the queue of the workers that can reach its nodes (Cluster.queue: a worker at its
site, `celery -A worker worker -Q site-a`). Every task that opens a connection to a cluster's nodes
or its controller goes there: node and group tasks (portal/runs/dispatch.py, also when the reaper
sends them again), the reaper's stop of orphaned process groups (portal/execution/reaper.py) and the
scheduler hooks (portal/health/services/state.py). Portal-only work (finalizing, health, alerts,
certificates, the reaper's database rounds) stays on the default queue.

A run freezes its cluster's queue in its snapshot when it starts (portal/runs/snapshot.py): its
re-sends go where its first messages went, even if the cluster's queue changed since. A run made
before queues existed has none in its snapshot and uses the default queue (where it was sent).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

# How long the reaper waits for workers to say which queues they consume: a live worker answers a
# broadcast in milliseconds; 1 s is Celery's own `inspect` default, and the reaper asks only when
# a queued check is overdue.
INSPECT_TIMEOUT_S = 1.0


def default_queue() -> str:
    return str(getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "") or "celery")


def run_queue(snapshot: dict[str, Any] | None) -> str:
    """The queue a run's node-reaching tasks go to: the one frozen in its snapshot."""
    return str((snapshot or {}).get("queue") or default_queue())


def served_queues(*, timeout: float = INSPECT_TIMEOUT_S) -> set[str] | None:
    """The queues the live workers consume (Celery's `inspect active_queues`): empty when no worker
    answered in `timeout`, None when the broker could not be asked (say nothing then)."""
    from worker.celery import app

    try:
        replies = app.control.inspect(timeout=timeout).active_queues()
    except Exception:  # the broker is away or cannot broadcast: unknown, not "nobody"
        logger.warning("reaper: could not ask the workers for their queues", exc_info=True)
        return None
    return {str(q.get("name")) for queues in (replies or {}).values() for q in queues or () if q.get("name")}
