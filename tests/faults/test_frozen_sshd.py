"""A node's sshd frozen (SIGSTOP) mid-check: its kernel still answers TCP, so only an SSH-level
keepalive with a reply deadline notices. The check ends `error` within 30 s saying so, the node's
remaining checks end at once with the same reason, and once the node answers again the reaper
stops the burn-in nobody could stop while it was frozen."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.health.services import reap
from portal.runs import services
from portal.runs.models import CheckResult, Run, RunEvent
from tests.faults.conftest import state_file
from tests.faults.helpers import sim_processes, wait_for

pytestmark = pytest.mark.integration


def test_it_reports_a_frozen_sshd_within_thirty_seconds_and_fails_the_rest_at_once(
    testbed_cluster, clean_testbed, processes, soak_plan, settings
) -> None:
    processes("worker", concurrency=2)
    node = testbed_cluster.nodes.get(hostname="gpu05")
    run = services.run_start(cluster=testbed_cluster, plan=soak_plan(3600), nodes=[node])
    burn = CheckResult.objects.filter(run=run, item_key="burn-in")
    state = state_file(clean_testbed, "gpu05")
    wait_for(lambda: sim_processes(state, "gpu_burn") and burn.exclude(remote_pgid=None).exists(), 60, "the burn-in")

    assert clean_testbed.freeze_sshd("gpu05")
    frozen = time.monotonic()
    results = CheckResult.objects.filter(run=run)
    wait_for(lambda: not results.filter(status__in=["queued", "running"]).exists(), 60, "the node's checks to end")
    took = time.monotonic() - frozen

    assert took < 30, f"the frozen sshd was noticed after {took:.0f} s"
    reasons = dict(results.values_list("item_key", "reason"))
    assert set(results.values_list("status", flat=True)) == {"error"}
    assert reasons["burn-in"].startswith("unreachable: sshd on gpu05 stopped answering: no reply to keepalives for ")
    assert reasons["ecc-health"] == reasons["burn-in"]  # the rest end at once, with the same reason
    ends = sorted(results.values_list("finished_at", flat=True))
    assert ends[-1] - ends[0] < timedelta(seconds=2)
    assert Run.objects.get(pk=run.pk).status == "error"
    assert sim_processes(state, "gpu_burn")  # nobody could stop it through a frozen sshd

    clean_testbed.thaw_sshd("gpu05")
    lapsed = timezone.now() + timedelta(seconds=settings.KILN_LEASE_TTL_S + 5)
    reap(now=lapsed)  # the next reaper round after the lease lapsed

    wait_for(lambda: not sim_processes(state, "gpu_burn"), 10, "the reaper to stop the burn-in")
    message = RunEvent.objects.get(run=run, kind="processes stopped").message
    assert message.startswith("burn-in on gpu05 (error, lease lapsed): process group ")
    assert message.endswith("stopped over a new connection by the reaper")
