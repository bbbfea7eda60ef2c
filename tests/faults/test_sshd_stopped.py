"""A node's sshd stopped mid-check (the listener and every session process killed, as when sshd is
restarted badly or the OOM killer takes it): the connection drops at once, so the running check
ends `error` saying the connection was lost while its command ran, the node's remaining checks end
at once with the same reason, the other nodes of the run are unaffected, and once sshd is back the
reaper stops whatever the dead sessions left running on the node."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.execution.reaper import reap
from portal.runs import services
from portal.runs.models import CheckResult, Run, RunEvent
from tests.faults.conftest import state_file
from tests.faults.helpers import sim_processes, wait_for

pytestmark = pytest.mark.integration


def _kill_sshd(testbed, hostname: str) -> list[int]:
    pids = testbed.sshd_processes(hostname)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    testbed.node(hostname).pid_file.unlink(missing_ok=True)
    return pids


def test_it_ends_a_nodes_checks_at_once_when_its_sshd_is_stopped_mid_check(
    testbed_cluster, clean_testbed, processes, soak_plan, settings
) -> None:
    processes("worker", concurrency=4)
    nodes = list(testbed_cluster.nodes.filter(hostname__in=("gpu04", "gpu05")))
    run = services.run_start(cluster=testbed_cluster, plan=soak_plan(20), nodes=nodes)
    burn = CheckResult.objects.filter(run=run, node__hostname="gpu05", item_key="burn-in")
    state = state_file(clean_testbed, "gpu05")
    wait_for(lambda: sim_processes(state, "gpu_burn") and burn.exclude(remote_pgid=None).exists(), 60, "the burn-in")

    assert _kill_sshd(clean_testbed, "gpu05")
    stopped = time.monotonic()
    results = CheckResult.objects.filter(run=run, node__hostname="gpu05")
    wait_for(lambda: not results.filter(status__in=["queued", "running"]).exists(), 30, "gpu05's checks to end")
    took = time.monotonic() - stopped
    print(f"sshd stopped: gpu05's checks ended {took:.1f} s later")

    assert took < 10, f"the stopped sshd was noticed after {took:.0f} s"
    reasons = dict(results.values_list("item_key", "reason"))
    assert set(results.values_list("status", flat=True)) == {"error"}, reasons
    assert reasons["burn-in"].startswith("unreachable: gpu05: connection lost"), reasons["burn-in"]
    assert reasons["ecc-health"] == reasons["burn-in"]  # the rest end at once, with the same reason

    wait_for(lambda: not Run.objects.get(pk=run.pk).is_active, 90, "the run to close")
    run.refresh_from_db()
    assert run.status == "error"
    healthy = CheckResult.objects.filter(run=run, node__hostname="gpu04")
    assert set(healthy.values_list("status", flat=True)) == {"pass"}  # the other node is unaffected

    clean_testbed.start_sshd("gpu05")
    if sim_processes(state, "gpu_burn"):  # the dead session's burn-in outlived it
        reap(now=timezone.now() + timedelta(seconds=settings.KILN_LEASE_TTL_S + 5))
        wait_for(lambda: not sim_processes(state, "gpu_burn"), 15, "the reaper to stop the burn-in")
        message = RunEvent.objects.get(run=run, kind="processes stopped").message
        assert message.startswith("burn-in on gpu05 (error, lease lapsed): process group ")
