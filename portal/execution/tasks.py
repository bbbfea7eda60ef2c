"""The run tasks (discovered by worker/celery.py). Thin: they adapt arguments and
call services. Their names are in portal/runs/dispatch.py, which sends them.

Every process registers them (portal/execution/apps.py), so the execution engine (node and group
execution, the reaper, the SSH transport with fabric and paramiko) is imported by the task bodies,
not here: a command that only sends tasks (`kiln run`) never loads it. A worker loads it once it is
ready (the reaper's start, portal/execution/reaping.py), before its first task."""

from __future__ import annotations

import logging

from celery.exceptions import SoftTimeLimitExceeded

from portal.runs import services
from portal.runs.dispatch import RUN_GROUP, RUN_NODE, STOP_ORPHANS
from portal.runs.models import Status
from worker.db import db_phase
from worker.decorators import kiln_task

logger = logging.getLogger(__name__)


@kiln_task(name=RUN_NODE)
def run_node(self, run_id: int, node_id: int) -> int:
    """Run one node's checks of a run, then try to close the run (fan-in through the database)."""
    from portal.execution.execution import execute_node

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


@kiln_task(name=RUN_GROUP)
def run_group(self, run_id: int, result_id: int, time_budget_s: float | None = None) -> bool:
    """Run one multi-node check of a run from its launcher, then let the run go on (fan-in)."""
    from portal.execution.groups import execute_group

    claim = self.request.id or f"eager-group-{result_id}"
    try:
        return execute_group(run_id=run_id, result_id=result_id, claim=claim, time_budget_s=time_budget_s)
    except SoftTimeLimitExceeded:
        services.group_result_error(
            result_id=result_id, claim=claim, reason="timed out: the group task passed its soft time limit"
        )
        return False
    except Exception:
        services.group_result_error(
            result_id=result_id,
            claim=claim,
            reason="internal error in Kiln while running the group check (see worker log)",
        )
        raise
    finally:
        with db_phase("finalise"):
            services.run_finalize(run_id=run_id)


@kiln_task(name=STOP_ORPHANS)
def stop_orphans(self, queue: str) -> int:
    """What an older Kiln's reaper sent to a cluster's queue (a message may still wait there): stop
    the process groups its runs left on nodes only this queue's workers reach. Each worker's reaper
    thread does this now (portal/execution/reaper.py, rule 3)."""
    from django.utils import timezone

    from portal.execution.reaper import stop_orphans as stop

    return stop(now=timezone.now(), queue=queue)
