"""Redis flushed while a run is queued (every message lost): the reaper finds the queued checks
whose messages the broker no longer holds, sends them again and says so in the run's log; the run
completes.

In production a queued check is presumed lost KILN_LOST_MESSAGE_S (60 s) after its task was sent and
the reaper looks every KILN_REAPER_INTERVAL_S (30 s): sent again within 90 s of the loss. What this
test proves is the mechanism (an overdue queued check, a broker that no longer holds its task, the
task sent again), so it runs it at test scale (PACE below) and asserts the bound that the same
arithmetic gives for it."""

from __future__ import annotations

import time

import pytest

from portal.catalog.models import TestPlan
from portal.execution.broker import pending_tasks
from portal.runs import services
from portal.runs.models import Run, RunEvent
from tests.conftest import _flush_broker
from tests.faults.helpers import wait_for

pytestmark = pytest.mark.integration

HOSTS = ("gpu04", "gpu05", "gpu06")
# The pace at test scale. Allowance 15 s: an idle worker with a free slot claims a delivered message
# in well under a second, so 15 s still tells a lost message from a slow claim on a loaded machine
# (a slower claim would have its task sent twice: harmless, but this test would fail on the extra line). The
# reaper interval at the floor portal/execution/reaper.py allows (5 s). The allowance is read where
# run_start stamps the queued checks (this process: settings) and by the reaper threads of the
# worker and beat this test starts (WorkerProcess.env copies os.environ; BeatProcess takes it too).
LOST_MESSAGE_S, REAPER_INTERVAL_S = 15, 5
PACE = {"KILN_LOST_MESSAGE_S": LOST_MESSAGE_S, "KILN_REAPER_INTERVAL_S": REAPER_INTERVAL_S}
# The run's bound after the flush, derived from the pace as production's three minutes were from its
# own (60 s + 30 s = 90 s expected, the rest margin): allowance + interval = 20 s, and 60 s of margin
# for a loaded machine (the worker and beat start after the flush, then the nodes' checks run). A
# reaper that kept production's pace (90 s) would miss it.
MARGIN_S = 60
BOUND_S = LOST_MESSAGE_S + REAPER_INTERVAL_S + MARGIN_S


def test_it_resends_a_queued_run_whose_messages_were_flushed_and_completes_it(
    settings, testbed_cluster, clean_testbed, processes, monkeypatch
) -> None:
    settings.KILN_LOST_MESSAGE_S = LOST_MESSAGE_S
    for name, value in PACE.items():
        monkeypatch.setenv(name, str(value))
    nodes = list(testbed_cluster.nodes.filter(hostname__in=HOSTS))
    run = services.run_start(cluster=testbed_cluster, plan=TestPlan.objects.get(slug="itest"), nodes=nodes)
    assert {key for key in pending_tasks(max_age_s=120) or set() if key[1][0] == run.pk} == {
        ("kiln.run_node", (run.pk, n.pk)) for n in nodes
    }

    _flush_broker()  # FLUSHDB: the run's messages are gone
    flushed = time.monotonic()
    processes("worker", concurrency=4)
    processes("beat")
    wait_for(lambda: not Run.objects.get(pk=run.pk).is_active, 230, "the run to end", every=0.5)
    took = time.monotonic() - flushed
    print(f"broker flushed: the run ended {took:.1f} s later")

    assert took < BOUND_S, f"the run took {took:.0f} s to end after its messages were lost (bound {BOUND_S} s)"
    run.refresh_from_db()
    assert run.status == "pass", run.reason
    messages = list(RunEvent.objects.filter(run=run, kind="re-enqueued").values_list("message", flat=True))
    assert sorted(m.split(":")[0] for m in messages) == list(HOSTS)
    assert all("queued check(s) waited" in m and "with no task in the broker; sent again" in m for m in messages)
