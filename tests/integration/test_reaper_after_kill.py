"""A run whose worker was killed (and whose broker will not redeliver in time) is closed by the reaper:
on the lease, not a deadline. While the dead worker's leases still run, the reaper leaves the run
alone (a slow check is not a dead one); once they lapse, the checks that had started a command are
`error: worker lost` and those that had not are queued again for another worker; and the checks no
worker ever takes are closed by the deadline backstop."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.catalog.models import TestPlan
from portal.execution.reaper import reap
from portal.runs import services
from portal.runs.models import CheckResult, Run
from worker.timeouts import node_task_limits

pytestmark = pytest.mark.integration


def test_it_acts_on_the_killed_workers_leases_once_they_lapse(
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
        while not results.filter(status="running").exclude(command_started_at=None).exists():
            assert time.monotonic() < deadline, "no check started"
            time.sleep(0.2)
        worker.kill()
    finally:
        worker.kill()
        _flush_broker()
    held = results.filter(status="running")
    started = set(held.exclude(command_started_at=None).values_list("id", flat=True))
    fresh = set(held.filter(command_started_at=None).values_list("id", flat=True))
    assert started

    # The leases are still running: a slow check is not a dead one.
    assert reap() == []
    assert Run.objects.get(pk=run.pk).status == "running"

    lapsed = max(held.values_list("lease_expires_at", flat=True)) + timedelta(seconds=1)
    try:
        assert reap(now=lapsed) == [run.pk]  # sends the fresh ones to the broker again
    finally:
        _flush_broker()  # no worker here: nothing may take them
    for result in results.filter(id__in=started):
        assert result.status == "error" and result.portal_fault
        assert result.reason.startswith("worker lost: itest-")
    assert set(results.filter(id__in=fresh).values_list("status", flat=True)) <= {"queued"}
    assert not results.filter(status="running").exists()

    # Nobody takes the queued ones (no worker, messages flushed): the deadline backstop closes them.
    _, hard = node_task_limits(
        command_budgets=[item["timeout_s"] for item in run.plan_snapshot["items"]],
        connect_timeout=settings.KILN_SSH_CONNECT_TIMEOUT,
    )
    assert reap(now=timezone.now() + timedelta(seconds=600 + 2 * hard + 60)) == [run.pk]
    assert not results.filter(status="queued").exists()
    run.refresh_from_db()
    assert run.status == "error" and run.finished_at is not None
