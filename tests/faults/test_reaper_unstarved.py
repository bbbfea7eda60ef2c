"""Nothing starves the reaper: a worker SIGKILLed mid burn-in has its run ended `error` (worker
lost) and its gpu_burn stopped on the nodes within two minutes, while every slot of the surviving
worker holds an hour-long burn-in (its reaper thread does it, no pool slot), and when no worker is
left at all (beat's reaper thread does it).

In production a lease lapses 30 s after its worker's last heartbeat and each reaper thread runs a
pass every 30 s: a dead worker's run is acted on within 60 s, inside the issue's two minutes. What
these tests prove is the mechanism (lapsed lease, a reaper pass outside any pool slot, in a worker
or in beat), so they run it at test scale (LIVENESS in tests/faults/helpers.py) and assert the bound that the same
arithmetic gives for it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from portal.runs import services
from portal.runs.models import CheckResult, Run, RunEvent
from tests.faults.conftest import state_file
from tests.faults.helpers import LIVENESS, REAP_BOUND_S, plan_of, sim_processes, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def liveness_at_test_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in LIVENESS.items():
        monkeypatch.setenv(name, str(value))


def _burn_plan() -> Any:
    """An hour-long burn-in alone: once it started, a lost worker's run has nothing left to re-run."""
    return plan_of("burn-hour", "burn-in", burn_in={"duration_s": 3600, "sample_interval_s": 1})


def _start_burning(cluster: Any, testbed: Any, plan: Any, hosts: tuple[str, ...]) -> Run:
    run = services.run_start(cluster=cluster, plan=plan, nodes=list(cluster.nodes.filter(hostname__in=hosts)))
    burns = CheckResult.objects.filter(run=run, item_key="burn-in")
    wait_for(
        lambda: (
            all(sim_processes(state_file(testbed, h), "gpu_burn") for h in hosts)
            and all(burns.values_list("remote_pgid", flat=True))
        ),
        90,
        f"gpu_burn to run on {', '.join(hosts)} with its process group recorded",
    )
    return run


def _assert_ended_and_stopped(run: Run, testbed: Any, hosts: tuple[str, ...], killed: float) -> None:
    wait_for(
        lambda: (
            not Run.objects.get(pk=run.pk).is_active
            and not any(sim_processes(state_file(testbed, h), "gpu_burn") for h in hosts)
            and not CheckResult.objects.filter(run=run, remote_pgid__isnull=False).exists()  # recorded as stopped
        ),
        REAP_BOUND_S + 60,
        "the dead worker's run to end and its gpu_burn to stop",
        every=0.5,
    )
    took = time.monotonic() - killed
    print(f"worker killed: its run ended and its gpu_burn stopped {took:.1f} s later")
    assert took < REAP_BOUND_S, f"{took:.0f} s after the worker was killed (bound {REAP_BOUND_S} s)"
    run.refresh_from_db()
    assert run.status == "error"
    for burn in CheckResult.objects.filter(run=run):
        assert burn.status == "error" and burn.portal_fault, (burn.status, burn.reason)
        assert burn.reason.startswith("worker lost: itest-"), burn.reason
        assert burn.remote_pgid is None
    kinds = list(RunEvent.objects.filter(run=run).values_list("kind", flat=True))
    assert kinds.count("processes stopped") == len(hosts), list(RunEvent.objects.filter(run=run).values_list("message"))


def test_a_busy_worker_reaps_its_dead_sibling_within_two_minutes(testbed_cluster, clean_testbed, processes) -> None:
    plan = _burn_plan()
    dying = processes("worker", concurrency=2)
    lost = _start_burning(testbed_cluster, clean_testbed, plan, ("gpu01", "gpu02"))
    processes("worker", concurrency=2)  # no beat: only the workers can reap here
    busy = _start_burning(testbed_cluster, clean_testbed, plan, ("gpu03", "gpu04"))

    dying.kill()
    killed = time.monotonic()
    _assert_ended_and_stopped(lost, clean_testbed, ("gpu01", "gpu02"), killed)

    # The survivor's slots were busy all along, and its burn-ins were left alone.
    assert Run.objects.get(pk=busy.pk).status == "running"
    assert set(CheckResult.objects.filter(run=busy).values_list("status", flat=True)) == {"running"}
    assert all(sim_processes(state_file(clean_testbed, h), "gpu_burn") for h in ("gpu03", "gpu04"))


def test_beat_reaps_when_no_worker_is_left(testbed_cluster, clean_testbed, processes) -> None:
    only = processes("worker", concurrency=2)
    processes("beat")
    run = _start_burning(testbed_cluster, clean_testbed, _burn_plan(), ("gpu01", "gpu02"))

    only.kill()
    killed = time.monotonic()
    _assert_ended_and_stopped(run, clean_testbed, ("gpu01", "gpu02"), killed)
