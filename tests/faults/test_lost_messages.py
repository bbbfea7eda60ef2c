"""Redis flushed while a run is queued (every message lost): the reaper finds the queued checks
whose messages the broker no longer holds, sends them again and says so in the run's log; the run
completes within three minutes with the default allowance (60 s) and reaper interval (30 s)."""

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


def test_it_resends_a_queued_run_whose_messages_were_flushed_and_completes_it(
    testbed_cluster, clean_testbed, processes
) -> None:
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

    assert took < 180, f"the run took {took:.0f} s to end after its messages were lost"
    run.refresh_from_db()
    assert run.status == "pass", run.reason
    messages = list(RunEvent.objects.filter(run=run, kind="re-enqueued").values_list("message", flat=True))
    assert sorted(m.split(":")[0] for m in messages) == list(HOSTS)
    assert all("queued check(s) waited" in m and "with no task in the broker; sent again" in m for m in messages)
