"""Redis killed and started again empty while a run is in progress (no persistence: every waiting
and unacknowledged message is gone). The checks already running finish and are recorded (the
database, not the broker, holds results); the workers reconnect by themselves; the node tasks whose
messages died are found by the reaper and sent again. The run ends with every result judged, none
lost, within three minutes of the restart (default allowance 60 s, reaper every 30 s)."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from portal.runs import services
from portal.runs.models import CheckResult, Run, RunEvent
from tests.faults.helpers import plan_of, wait_for

pytestmark = pytest.mark.integration

HOSTS = ("gpu01", "gpu02", "gpu03", "gpu04")


@pytest.mark.timeout(420)
def test_it_completes_a_run_whose_broker_was_restarted_empty_mid_run(
    private_broker, testbed_cluster, clean_testbed, processes
) -> None:
    for host in HOSTS:
        clean_testbed.set_faults(host, delay_ms=1500)  # each check waits on its node for seconds
    processes("worker", concurrency=2)  # two nodes run, the other two wait in the broker
    processes("beat")
    nodes = list(testbed_cluster.nodes.filter(hostname__in=HOSTS))
    plan = plan_of("restart", "gpu-inventory", "ecc-health")
    run = services.run_start(cluster=testbed_cluster, plan=plan, nodes=nodes)
    results = CheckResult.objects.filter(run=run)
    wait_for(lambda: results.filter(status="running").exists(), 60, "the first checks to run")

    private_broker.stop()
    private_broker.start()  # empty: the queued and unacknowledged messages are gone
    restarted = time.monotonic()
    restarted_at = timezone.now()
    wait_for(lambda: not Run.objects.get(pk=run.pk).is_active, 230, "the run to end", every=0.5)
    took = time.monotonic() - restarted
    resent = list(RunEvent.objects.filter(run=run, kind="re-enqueued").values_list("message", flat=True))
    print(f"broker restarted empty: the run ended {took:.1f} s later; {len(resent)} node task(s) sent again")

    assert took < 180, f"the run took {took:.0f} s to end after the broker restarted"
    run.refresh_from_db()
    rows = list(results.values_list("node__hostname", "item_key", "status", "reason"))
    assert run.status == "pass", rows
    assert {status for *_, status, _ in rows} == {"pass"} and len(rows) == 2 * len(HOSTS)
    assert all("sent again" in message for message in resent)
    # Sent again within two minutes of the loss, however busy the workers (the reaper is no task).
    late = [
        (at - restarted_at).total_seconds()
        for at in RunEvent.objects.filter(run=run, kind="re-enqueued").values_list("at", flat=True)
    ]
    assert resent and max(late) < 120, late
