"""The same node task delivered twice while the first delivery is running (a broker redelivery, a
restored unacked message): the second runs nothing on the node. Before leases it re-claimed its
own running rows and ran the burn-in again (attempt 2): twice the GPU load."""

from __future__ import annotations

import re
import uuid

import pytest
from django.db.models import Count

from portal.runs import services
from portal.runs.models import CheckResult, Run, Series
from tests.faults.conftest import state_file
from tests.faults.helpers import sim_processes, wait_for

pytestmark = pytest.mark.integration


def test_it_runs_nothing_twice_when_a_task_is_delivered_twice(
    testbed_cluster, clean_testbed, processes, soak_plan
) -> None:
    from portal.execution.tasks import run_node

    worker = processes("worker", concurrency=4)
    node = testbed_cluster.nodes.get(hostname="gpu03")
    run = services.run_start(cluster=testbed_cluster, plan=soak_plan(8), nodes=[node], enqueue=False)
    task_id = f"dup-{uuid.uuid4()}"
    run_node.apply_async(args=(run.pk, node.pk), task_id=task_id)
    state = state_file(clean_testbed, "gpu03")
    wait_for(lambda: sim_processes(state, "gpu_burn"), 60, "the burn-in to start")

    run_node.apply_async(args=(run.pk, node.pk), task_id=task_id)  # the same message again
    most = 0

    def ended() -> bool:
        nonlocal most
        most = max(most, len(sim_processes(state, "gpu_burn")))
        return not Run.objects.get(pk=run.pk).is_active

    wait_for(ended, 90, "the run to end", every=0.2)

    assert most == 1, f"{most} gpu_burn processes ran at once on gpu03"
    results = CheckResult.objects.filter(run=run)
    assert set(results.values_list("status", "attempt")) == {("pass", 1)}
    per_result = Series.objects.filter(result__run=run).values("result").annotate(n=Count("id"))
    assert len({row["n"] for row in per_result}) == 1  # no result holds a second copy of its curves

    def returns_logged() -> list[str]:  # the run closes inside the task, a moment before Celery logs its return
        log = worker.log_path.read_text(errors="replace")
        return re.findall(rf"kiln\.run_node\[{task_id}\] succeeded in [0-9.]+s: (\d+)", log)

    wait_for(lambda: len(returns_logged()) >= 2, 15, "both deliveries to return")
    returns = returns_logged()
    assert sorted(returns) == ["0", "2"], returns  # one delivery recorded both checks, the other none
