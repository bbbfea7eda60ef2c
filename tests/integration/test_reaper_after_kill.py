"""A run whose worker was killed (and whose broker will not redeliver in time) is closed by the reaper:
its stuck results become `error` with the reason once their deadline passes, never before."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.catalog.models import TestPlan
from portal.health.services import reap
from portal.runs import services
from portal.runs.models import CheckResult, Run
from worker.timeouts import node_task_limits

pytestmark = pytest.mark.integration


def test_it_marks_the_killed_workers_results_error_after_their_deadline(
    settings, testbed_cluster, clean_testbed, real_services, tmp_path
) -> None:
    from tests.conftest import WorkerProcess, _flush_broker

    settings.KILN_SSH_CONNECT_TIMEOUT = 3
    settings.KILN_TASK_SLACK_S = 5
    settings.KILN_REAPER_GRACE_S = 10
    settings.KILN_REAPER_QUEUE_ALLOWANCE_S = 600
    # The default visibility timeout (25 h): the broker will not redeliver during this test, as after
    # a crash on the embedded filesystem broker, which never redelivers. Only the reaper can close it.
    TestPlan.objects.get(slug="itest").items.update(param_overrides={"timeout_s": 3})
    for node in clean_testbed.nodes:
        clean_testbed.set_faults(node.hostname, delay_ms=1500)

    _flush_broker()
    worker = WorkerProcess(tmp_path / "worker.log", concurrency=2)
    worker.start()
    try:
        run = services.run_start(cluster=testbed_cluster, plan=TestPlan.objects.get(slug="itest"))
        results = CheckResult.objects.filter(run=run)
        deadline = time.monotonic() + 60
        while not results.filter(status="running").exists():
            assert time.monotonic() < deadline, "no check started"
            time.sleep(0.2)
        worker.kill()
    finally:
        worker.kill()
        _flush_broker()
    stuck = set(results.filter(status="running").values_list("id", flat=True))
    assert stuck

    # Before the deadline the reaper leaves the run alone: a slow check is not a dead one.
    assert reap() == []
    assert Run.objects.get(pk=run.pk).status == "running"

    _, hard = node_task_limits(
        command_budgets=[item["timeout_s"] for item in run.plan_snapshot["items"]],
        connect_timeout=settings.KILN_SSH_CONNECT_TIMEOUT,
    )
    after_deadline = timezone.now() + timedelta(seconds=hard + settings.KILN_REAPER_GRACE_S + 1)
    assert reap(now=after_deadline) == [run.pk]
    for result in results.filter(id__in=stuck):
        assert result.status == "error"
        assert "worker probably died" in result.reason
    assert not results.filter(status="running").exists()
    queued = results.filter(status="queued")
    if queued.exists():
        # Checks the dead worker never started wait for a live worker, up to the queue allowance.
        assert Run.objects.get(pk=run.pk).status == "running"
        assert reap(now=timezone.now() + timedelta(seconds=600 + 2 * hard + 60)) == [run.pk]
        assert not queued.exists()
    run.refresh_from_db()
    assert run.status == "error"
    assert run.finished_at is not None
