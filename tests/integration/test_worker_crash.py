"""Kill the Celery worker mid-run, start another: the run completes, nothing lost, nothing doubled."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db.models import Count, QuerySet

from portal.catalog.models import TestPlan
from portal.runs import services
from portal.runs.models import CheckResult, Measurement, Run

pytestmark = pytest.mark.integration


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, diagnose: Callable[[], str] = str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{diagnose()}")


def _state(results: QuerySet[CheckResult], log: Path) -> str:
    """What a timeout leaves to read: each result's holder and attempt, and the new worker's log tail."""
    rows = results.order_by("node__hostname", "item_key").values_list(
        "node__hostname", "item_key", "status", "attempt", "claimed_by", "worker_name", "lease_expires_at"
    )
    tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else ["(no log)"]
    return "\n".join([*map(str, rows), "--- worker-2 log tail ---", *tail])


@pytest.mark.timeout(480)
def test_it_completes_a_run_after_the_worker_is_killed(
    settings, testbed_cluster, clean_testbed, real_services, tmp_path, monkeypatch
) -> None:
    from tests.conftest import WorkerProcess, _flush_broker

    # This is the redelivered task's path. The reaper (a thread in every worker) would end the
    # interrupted checks `error` ("worker lost") once their 30 s leases lapse, before the 60 s
    # redelivery: its passes are spaced past the run here (tests/faults/test_reaper_unstarved.py
    # and tests/integration/test_reaper_after_kill.py take the reaper's path).
    monkeypatch.setenv("KILN_REAPER_INTERVAL_S", "900")

    # Short nested timeouts so the broker's visibility timeout (how long a killed worker's task
    # waits before redelivery) can be short too: check 3 s < task hard limit (54 s: each command's
    # budget, the inventory's identity reads of 3 s and 3 + 5 s among them, + REMOTE_KILL_GRACE_S
    # 5 s + CHANNEL_SLACK_S 5 s, 2 connects x 3 s, slack 3 s, then + 5 s; worker/timeouts.py,
    # which run_start checks) < visibility 60 s. The visibility must also outlast the killed
    # worker's leases (KILN_LEASE_TTL_S 30 s after its last heartbeat, a few seconds after the
    # delivery): a redelivered task claims no check under a live lease.
    settings.KILN_SSH_CONNECT_TIMEOUT = 3
    settings.KILN_TASK_SLACK_S = 3
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 60}
    TestPlan.objects.get(slug="itest").items.update(param_overrides={"timeout_s": 3})
    # Slow, healthy nodes: a check takes long enough to be caught running, and leaves 2.4 s of its
    # 3 s to the probe's start on a loaded machine (with 1.2 s of 2 s, a CI run timed the probe out).
    for node in clean_testbed.nodes:
        clean_testbed.set_faults(node.hostname, delay_ms=600)

    _flush_broker()
    first = WorkerProcess(tmp_path / "worker-1.log", concurrency=2)
    first.start()
    try:
        run = services.run_start(cluster=testbed_cluster, plan=TestPlan.objects.get(slug="itest"))
        results = CheckResult.objects.filter(run=run)
        wait_for(
            lambda: results.filter(status="pass").exists() and results.filter(status="running").exists(),
            60,
            "one finished and one running check",
        )
        first.kill()
        interrupted = set(results.filter(status="running").values_list("id", flat=True))
        done_before = results.filter(status="pass").count()
        assert interrupted and done_before < results.count()
        assert Run.objects.get(pk=run.pk).status == "running"

        # The new worker looks for messages past their visibility timeout every second (kombu takes
        # whole seconds; one small Redis query each), not every ~100 s (portal/settings.py,
        # KILN_BROKER_RESTORE_S): the redelivery comes when the timeout does. Not the killed worker:
        # a look holds kombu's lock in Redis for a moment, and one SIGKILLed in it would keep it from
        # the new worker for 5 minutes.
        monkeypatch.setenv("KILN_BROKER_RESTORE_S", "1")
        second = WorkerProcess(tmp_path / "worker-2.log", concurrency=4)
        second.start()
        try:
            # Redelivery waits out the visibility timeout (60 s after the delivery), then the
            # node's remaining checks run at 0.6 s per node call: ~60 s after the kill on an idle
            # machine, so the budget leaves room for a loaded CI runner.
            wait_for(
                lambda: Run.objects.get(pk=run.pk).status not in ("queued", "running"),
                330,
                "the run to end",
                diagnose=lambda: _state(results, second.log_path),
            )
        finally:
            second.stop()
    finally:
        first.kill()
        _flush_broker()

    run.refresh_from_db()
    assert run.status == "pass", (run.status, list(results.values_list("node__hostname", "item_key", "reason")))
    assert results.count() == 8 * 2
    assert set(results.values_list("status", flat=True)) == {"pass"}
    # The checks the dead worker held were claimed again by the redelivered task (same claim id).
    assert set(results.filter(attempt__gte=2).values_list("id", flat=True)) >= interrupted, list(
        results.values_list("id", "node__hostname", "item_key", "attempt", "claimed_by", "started_at", "finished_at")
    )
    # No doubled evidence: each inventory result has exactly one UUID per GPU.
    per_result = Measurement.objects.filter(result__run=run, name="gpu_uuid").values("result").annotate(n=Count("id"))
    assert sorted(row["n"] for row in per_result) == [8] * 8
