"""Redis killed and started again empty while a run is in progress (no persistence: every waiting
and unacknowledged message is gone). The checks already running finish and are recorded (the
database, not the broker, holds results); the workers reconnect by themselves; the node tasks whose
messages died are found by the reaper and sent again. The run ends with every result judged, none
lost.

In production the reaper presumes a queued check's message lost KILN_LOST_MESSAGE_S (60 s) after it
was sent and looks every KILN_REAPER_INTERVAL_S (30 s): sent again within 90 s of the loss, inside
two minutes. What this test proves is the mechanism (reconnecting workers, lost tasks sent again by
the reaper), so it runs it at test scale (PACE below) and asserts the bounds that the same arithmetic
gives for it."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from portal.runs import services
from portal.runs.models import CheckResult, Run, RunEvent
from tests.faults.helpers import plan_of, wait_for

pytestmark = pytest.mark.integration

HOSTS = ("gpu01", "gpu02", "gpu03", "gpu04")
# The pace at test scale. Allowance 15 s: a worker with a free slot claims a delivered message in
# well under a second, so 15 s still tells a lost message from a slow claim on a loaded machine (and
# a task sent twice is harmless: the claim takes nothing a live lease holds). The reaper interval at
# the floor portal/execution/reaper.py allows (5 s). The allowance is read where run_start stamps
# the queued checks (this process: settings) and by the reaper threads of the worker and beat this
# test starts (WorkerProcess.env copies os.environ; BeatProcess takes it too).
LOST_MESSAGE_S, REAPER_INTERVAL_S = 15, 5
PACE = {"KILN_LOST_MESSAGE_S": LOST_MESSAGE_S, "KILN_REAPER_INTERVAL_S": REAPER_INTERVAL_S}
# The bounds after the restart, derived from the pace as production's were from its own (three
# minutes for the run, two for the tasks to be sent again, against 60 s + 30 s = 90 s expected):
# allowance + interval = 20 s, and 60 s of margin for a loaded machine (the workers reconnect, the
# nodes' checks run at 1.5 s per node call). A reaper that kept production's pace (90 s) would miss
# them.
MARGIN_S = 60
BOUND_S = LOST_MESSAGE_S + REAPER_INTERVAL_S + MARGIN_S


@pytest.mark.timeout(420)
def test_it_completes_a_run_whose_broker_was_restarted_empty_mid_run(
    settings, private_broker, testbed_cluster, clean_testbed, processes, monkeypatch
) -> None:
    settings.KILN_LOST_MESSAGE_S = LOST_MESSAGE_S
    for name, value in PACE.items():
        monkeypatch.setenv(name, str(value))
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

    assert took < BOUND_S, f"the run took {took:.0f} s to end after the broker restarted (bound {BOUND_S} s)"
    run.refresh_from_db()
    rows = list(results.values_list("node__hostname", "item_key", "status", "reason"))
    assert run.status == "pass", rows
    assert {status for *_, status, _ in rows} == {"pass"} and len(rows) == 2 * len(HOSTS)
    assert all("sent again" in message for message in resent)
    # Sent again within the bound of the loss, however busy the workers (the reaper is no task).
    late = [
        (at - restarted_at).total_seconds()
        for at in RunEvent.objects.filter(run=run, kind="re-enqueued").values_list("at", flat=True)
    ]
    assert resent and max(late) < BOUND_S, late
