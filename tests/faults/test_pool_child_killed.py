"""A prefork pool child SIGKILLed mid burn-in: Celery gives its message to a sibling at once
(reject_on_worker_lost), and the sibling, seeing that the lease's holder was a process of this very
worker that is gone, takes the checks over without waiting out the lease: it stops the burn-in the
dead child left on the node, then runs it again. The run passes within seconds, never with two
gpu_burns at once."""

from __future__ import annotations

import os
import signal
import time

import pytest

from portal.runs import services
from portal.runs.models import CheckResult, Run, RunEvent
from tests.conftest import WorkerProcess
from tests.faults.conftest import state_file
from tests.faults.helpers import sim_processes, wait_for

pytestmark = pytest.mark.integration


# The burn-in's length, each attempt: long enough that the child is SIGKILLed mid-burn (the kill
# follows the recorded process group within a second), short because the second attempt is most of
# the wait; the simulated burn-in passes from 3 s (checks/burnin/check.py simulator_params).
BURN_S = 8
# Over the second burn, for the take-over (stop the dead child's gpu_burn, claim again) and the
# ecc-health after it on a loaded machine. Waiting out the lease instead would add 27-30 s (the
# production lease of 30 s, less the heartbeat of 3 s since the last renewal): more than this.
TAKEOVER_MARGIN_S = 15


def test_a_sibling_takes_over_at_once_from_a_killed_pool_child(
    testbed_cluster, clean_testbed, processes, soak_plan, tmp_path
) -> None:
    from django.conf import settings

    # The lease the worker runs with (its environment is this process's) must outlast the margin,
    # or the bound below would not tell a take-over from a lapsed lease.
    assert TAKEOVER_MARGIN_S < settings.KILN_LEASE_TTL_S - settings.KILN_HEARTBEAT_S
    worker = WorkerProcess(tmp_path / "prefork.log", concurrency=2, pool="prefork")  # KILN_WORKER_POOL
    worker.start()
    try:
        node = testbed_cluster.nodes.get(hostname="gpu04")
        run = services.run_start(cluster=testbed_cluster, plan=soak_plan(BURN_S), nodes=[node])
        burn = CheckResult.objects.filter(run=run, item_key="burn-in")
        state = state_file(clean_testbed, "gpu04")
        wait_for(lambda: sim_processes(state, "gpu_burn") and burn.exclude(remote_pgid=None).exists(), 60, "burn-in")
        child = int(burn.get().worker_name.rpartition(" pid ")[2])
        assert child != worker.process.pid

        os.kill(child, signal.SIGKILL)
        killed = time.monotonic()
        most = 0

        def ended() -> bool:
            nonlocal most
            most = max(most, len(sim_processes(state, "gpu_burn")))
            return not Run.objects.get(pk=run.pk).is_active

        wait_for(ended, 90, "the run to end", every=0.2)
        took = time.monotonic() - killed
        print(f"pool child killed: the run ended {took:.1f} s later")
    finally:
        worker.kill()

    # The burn-in runs again (BURN_S): without the take-over it would first wait out the 30 s lease.
    assert took < BURN_S + TAKEOVER_MARGIN_S, f"the run took {took:.0f} s after its pool child was killed"
    assert Run.objects.get(pk=run.pk).status == "pass"
    assert burn.get().attempt == 2 and burn.get().status == "pass"
    assert most == 1, f"{most} gpu_burns at once on gpu04"
    stopped = RunEvent.objects.get(run=run, kind="processes stopped").message
    assert stopped.startswith("burn-in on gpu04: the previous attempt's process group ")
