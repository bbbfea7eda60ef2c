"""A worker SIGKILLed mid burn-in, then a fresh worker started: the run ends truthfully within two
minutes whatever the burn-in's length (its lease lapses and the reaper acts), the interrupted
burn-ins are `error: worker lost`, the checks that had not started run on the new worker, and
the gpu_burn left running on the nodes is stopped over a new connection.

Two minutes is production's bound (lease 30 s + reaper interval 30 s = 60 s, and margin); the
test runs the same mechanism at test scale (LIVENESS in tests/faults/helpers.py) and asserts the bound the same
arithmetic gives for it."""

from __future__ import annotations

import time

import pytest

from portal.runs import services
from portal.runs.models import CheckResult, Run, RunEvent
from tests.faults.conftest import state_file
from tests.faults.helpers import LIVENESS, REAP_BOUND_S, sim_processes, wait_for

pytestmark = pytest.mark.integration

HOSTS = ("gpu01", "gpu02")


def test_it_ends_a_killed_workers_run_within_two_minutes_and_stops_its_gpu_burn(
    testbed_cluster, clean_testbed, processes, soak_plan, monkeypatch
) -> None:
    for name, value in LIVENESS.items():
        monkeypatch.setenv(name, str(value))
    first = processes("worker", concurrency=2)
    processes("beat")
    nodes = list(testbed_cluster.nodes.filter(hostname__in=HOSTS))
    run = services.run_start(cluster=testbed_cluster, plan=soak_plan(3600), nodes=nodes)  # a 1 h burn-in
    burns = CheckResult.objects.filter(run=run, item_key="burn-in")
    wait_for(
        lambda: (
            all(sim_processes(state_file(clean_testbed, h), "gpu_burn") for h in HOSTS)
            and all(burns.values_list("remote_pgid", flat=True))
        ),
        90,
        "gpu_burn to run on both nodes with its process group recorded",
    )

    first.kill()
    killed = time.monotonic()
    processes("worker", concurrency=2)
    # Waits past the bound, so that a slow end fails the assertion below, with its time.
    wait_for(lambda: not Run.objects.get(pk=run.pk).is_active, REAP_BOUND_S + 50, "the run to end", every=0.5)
    took = time.monotonic() - killed
    print(f"worker killed: the run ended {took:.1f} s later")

    assert took < REAP_BOUND_S, f"the run took {took:.0f} s to end after its worker was killed (bound {REAP_BOUND_S} s)"
    run.refresh_from_db()
    assert run.status == "error"

    # The pass that ends the run stops the orphaned burns next: their stop is recorded moments later,
    # still within the bound.
    def stopped() -> bool:
        return not burns.exclude(remote_pgid=None).exists()

    wait_for(stopped, max(1.0, REAP_BOUND_S - took), "the burns' stop recorded")
    for burn in burns:
        assert burn.status == "error" and burn.portal_fault
        assert burn.reason.startswith("worker lost: itest-") and ", last heartbeat " in burn.reason
        assert burn.remote_pgid is None
    # The checks that had not started ran on the new worker: their nodes are fine.
    ecc = CheckResult.objects.filter(run=run, item_key="ecc-health")
    assert set(ecc.values_list("status", flat=True)) == {"pass"}, list(ecc.values_list("reason", flat=True))
    for host in HOSTS:
        assert sim_processes(state_file(clean_testbed, host), "gpu_burn") == [], f"gpu_burn still runs on {host}"
    kinds = list(RunEvent.objects.filter(run=run).values_list("kind", flat=True))
    assert kinds.count("worker lost") == 2 and kinds.count("re-enqueued") == 2, kinds
    assert kinds.count("processes stopped") == 2, list(RunEvent.objects.filter(run=run).values_list("message"))
