"""Sending the run tasks, with time limits from the run's snapshot (nested timeouts).

Services call these (a run starts, a node's results let a group check go, the reaper sends lost
work again), and the tasks call those services, so this module names the tasks instead of
importing them: `app.signature(name)` finds the registered task (and so honours eager mode) and
falls back to sending by name. The names are a contract with messages in flight and the broker
inspection (portal/execution/broker.py): never rename them.
"""

from __future__ import annotations

from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.conf import settings

from portal.runs.models import CheckResult, Run
from portal.runs.pairs import group_item_limits
from portal.runs.queues import run_queue
from worker.celery import app
from worker.timeouts import node_task_limits

RUN_NODE = "kiln.run_node"
RUN_GROUP = "kiln.run_group"
# The task an older Kiln sent to stop orphaned process groups on a cluster's own queue; still
# registered (portal/execution/tasks.py) so that a message left in a queue runs.
STOP_ORPHANS = "kiln.stop_orphans"


def enqueue_node(*, run_id: int, node_id: int, plan_snapshot: dict[str, Any] | None = None) -> None:
    """Send one node's task with time limits derived from the run's snapshot (nested timeouts), to
    the queue the snapshot names (the workers that reach the cluster's nodes). A caller that holds
    the snapshot (a run just created) passes it: one query and one JSON decode less per node."""
    if plan_snapshot is None:
        plan_snapshot = Run.objects.only("plan_snapshot").get(pk=run_id).plan_snapshot
    soft, hard = node_task_limits(
        command_budgets=[item["timeout_s"] for item in plan_snapshot["items"]],
        connect_timeout=settings.KILN_SSH_CONNECT_TIMEOUT,
    )
    app.signature(RUN_NODE).apply_async(
        args=(run_id, node_id), soft_time_limit=soft, time_limit=hard, queue=run_queue(plan_snapshot)
    )


def enqueue_group(*, run_id: int, result_id: int) -> None:
    """Send a group check's task with the limits of portal.runs.pairs.group_item_limits; the task
    stops starting pair rounds when its budget (soft limit less the slack) would run out."""
    run = Run.objects.only("plan_snapshot", "node_set").get(pk=run_id)
    result = CheckResult.objects.only("item_key").get(pk=result_id)
    item = next(i for i in run.plan_snapshot["items"] if i["key"] == result.item_key)
    soft, hard = group_item_limits(item=item, node_count=len(NodeSet(run.node_set)))
    app.signature(RUN_GROUP).apply_async(
        args=(run_id, result_id),
        kwargs={"time_budget_s": soft - settings.KILN_TASK_SLACK_S},
        soft_time_limit=soft,
        time_limit=hard,
        queue=run_queue(run.plan_snapshot),
    )
