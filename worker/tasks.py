"""Celery tasks. Thin: they adapt arguments and call services."""

from __future__ import annotations

import logging

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from worker.db import db_phase
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
        with db_phase("finalise"):
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


@kiln_task(name="kiln.run_group")
def run_group(self, run_id: int, result_id: int, time_budget_s: float | None = None) -> bool:
    """Run one multi-node check of a run from its launcher, then let the run go on (fan-in)."""
    from portal.runs import services
    from portal.runs.execution import execute_group
    from portal.runs.models import CheckResult, Status

    claim = self.request.id or f"eager-group-{result_id}"
    try:
        return execute_group(run_id=run_id, result_id=result_id, claim=claim, time_budget_s=time_budget_s)
    except SoftTimeLimitExceeded:
        CheckResult.objects.filter(pk=result_id, status=Status.RUNNING, claimed_by=claim).update(
            status=Status.ERROR, reason="timed out: the group task passed its soft time limit"
        )
        return False
    except Exception:
        CheckResult.objects.filter(pk=result_id, status=Status.RUNNING, claimed_by=claim).update(
            status=Status.ERROR, reason="internal error in Kiln while running the group check (see worker log)"
        )
        raise
    finally:
        with db_phase("finalise"):
            services.run_finalize(run_id=run_id)


def enqueue_group(*, run_id: int, result_id: int) -> None:
    """Send a group check's task with the limits of portal.runs.execution.group_item_limits; the task
    stops starting pair rounds when its budget (soft limit less the slack) would run out."""
    from ClusterShell.NodeSet import NodeSet

    from portal.runs.execution import group_item_limits
    from portal.runs.models import CheckResult, Run

    run = Run.objects.only("plan_snapshot", "node_set").get(pk=run_id)
    result = CheckResult.objects.only("item_key").get(pk=result_id)
    item = next(i for i in run.plan_snapshot["items"] if i["key"] == result.item_key)
    soft, hard = group_item_limits(item=item, node_count=len(NodeSet(run.node_set)))
    run_group.apply_async(
        args=(run_id, result_id),
        kwargs={"time_budget_s": soft - settings.KILN_TASK_SLACK_S},
        soft_time_limit=soft,
        time_limit=hard,
    )
