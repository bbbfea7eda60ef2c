"""Celery tasks. Thin: they adapt arguments and call services."""

from __future__ import annotations

import logging

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from worker.decorators import kiln_task

logger = logging.getLogger(__name__)


@kiln_task(name="kiln.run_node")
def run_node(self, run_id: int, node_id: int) -> int:
    """Run one node's checks of a run, then try to close the run (fan-in through the database)."""
    from portal.runs import services
    from portal.runs.execution import execute_node
    from portal.runs.models import Status

    claim = self.request.id or f"eager-{run_id}-{node_id}"
    try:
        return execute_node(run_id=run_id, node_id=node_id, claim=claim)
    except SoftTimeLimitExceeded:
        services.results_fail_remaining(
            run_id=run_id,
            node_id=node_id,
            claim=claim,
            status=Status.ERROR,
            reason=f"timed out: the node's task passed its soft time limit ({(self.request.timelimit or (0, 0))[1]}s)",
        )
        return 0
    finally:
        services.run_finalize(run_id=run_id)


def enqueue_node(*, run_id: int, node_id: int) -> None:
    """Send one node's task with time limits derived from the run's snapshot (nested timeouts)."""
    from portal.runs.models import Run
    from worker.timeouts import node_task_limits

    run = Run.objects.only("plan_snapshot").get(pk=run_id)
    soft, hard = node_task_limits(
        command_budgets=[item["timeout_s"] for item in run.plan_snapshot["items"]],
        connect_timeout=settings.KILN_SSH_CONNECT_TIMEOUT,
    )
    run_node.apply_async(args=(run_id, node_id), soft_time_limit=soft, time_limit=hard)
