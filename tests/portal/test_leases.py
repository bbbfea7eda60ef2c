"""Leases on the local transport (real processes, the node simulator, no sshd): the heartbeat
renews what a task holds, a check records when it touched the node and which process group runs
for it, and cancel stops that group within seconds while nothing it still does is recorded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.execution.execution import execute_node
from portal.inventory.models import Cluster, Node
from portal.runs import leases, services
from portal.runs.models import CheckResult, Run, RunEvent
from tests.faults.helpers import sim_processes, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from testbed.sim import build_simulator

    return build_simulator(tmp_path_factory.mktemp("sim"))


@pytest.fixture
def sim_node(sim: Any, tmp_path: Path, transactional_db: None) -> Node:
    from testbed.sim import node_env, write_state

    cluster = Cluster.objects.create(name="lease", transport="local", profile="H100-SXM-8")
    state = tmp_path / "n01.state"
    write_state(state, node="n01")
    return Node.objects.create(cluster=cluster, hostname="n01", local_env=node_env(sim, state))


def burn_plan(duration_s: int) -> TestPlan:
    plan = TestPlan.objects.create(slug=f"burn-{duration_s}", name="burn")
    TestPlanItem.objects.create(
        plan=plan,
        check_definition=CheckDefinition.objects.get(slug="burn-in"),
        order=0,
        param_overrides={"duration_s": duration_s, "sample_interval_s": 0.5},
    )
    TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug="ecc-health"), order=1)
    return plan


def in_thread(target: Callable[[], Any]) -> threading.Thread:
    def run() -> None:
        from django.db import connection

        try:
            target()
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_it_stops_a_running_burn_in_within_seconds_of_cancel_and_records_nothing(sim_node: Node) -> None:
    run = services.run_start(cluster=sim_node.cluster, plan=burn_plan(600), enqueue=False)
    state = sim_node.local_env["KILN_SIM_STATE"]
    worker = in_thread(lambda: execute_node(run_id=run.pk, node_id=sim_node.pk, claim="task-1"))
    wait_for(lambda: sim_processes(state, "gpu_burn"), 30, "gpu_burn to run")
    burn = CheckResult.objects.get(run=run, item_key="burn-in")
    assert burn.status == "running" and burn.command_started_at is not None
    wait_for(lambda: CheckResult.objects.get(pk=burn.pk).remote_pgid, 10, "the process group to be recorded")

    cancelled_at = time.monotonic()
    assert services.run_cancel(run=run, reason="cancelled by otto") == 2
    wait_for(lambda: not sim_processes(state, "gpu_burn"), 10, "gpu_burn to be stopped")
    stopped_after = time.monotonic() - cancelled_at
    worker.join(15)

    assert not worker.is_alive()
    assert stopped_after < 10
    assert set(CheckResult.objects.filter(run=run).values_list("status", flat=True)) == {"cancelled"}
    assert CheckResult.objects.get(pk=burn.pk).remote_pgid is None
    assert Run.objects.get(pk=run.pk).status == "cancelled"
    log = list(RunEvent.objects.filter(run=run).exclude(kind="cross_node").values_list("kind", "message"))
    assert log[0] == ("cancelled", "cancelled by otto: 2 running and 0 queued check(s) cancelled")  # claimed together
    assert log[1][0] == "processes stopped" and log[1][1].startswith("burn-in on n01 (cancelled): process group")


def test_it_renews_the_leases_of_what_a_task_holds(sim_node: Node, settings: Any) -> None:
    settings.KILN_HEARTBEAT_S = 0.2
    settings.KILN_LEASE_TTL_S = 30
    run = services.run_start(cluster=sim_node.cluster, plan=burn_plan(600), enqueue=False)
    claimed = services.results_claim(run_id=run.pk, node_id=sim_node.pk, claim="task-1")
    CheckResult.objects.filter(run=run).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    with leases.held(claim="task-1", results=claimed, label="n01"):
        wait_for(
            lambda: all(r.lease_expires_at > timezone.now() for r in CheckResult.objects.filter(run=run)),
            5,
            "the heartbeat to renew both leases",
        )
        renewed = {r.pk: r.heartbeat_at for r in CheckResult.objects.filter(run=run)}
    time.sleep(0.6)  # released: no more beats
    assert {r.pk: r.heartbeat_at for r in CheckResult.objects.filter(run=run)} == renewed
    assert all("pid" in r.worker_name for r in CheckResult.objects.filter(run=run))


def test_a_command_start_is_written_ahead_of_the_queued_process_group_writes(sim_node: Node) -> None:
    """A task waits for its "command started" mark before its command starts; nobody waits on the
    process-group writes queued before it (thousands in a tick at 256 nodes): the mark goes first."""
    run = services.run_start(cluster=sim_node.cluster, plan=burn_plan(600), enqueue=False)
    claimed = services.results_claim(run_id=run.pk, node_id=sim_node.pk, claim="task-1")
    keeper = leases.LeaseKeeper()
    order: list[str] = []
    going = threading.Event()

    def slow(name: str) -> Callable[[], None]:
        def write() -> None:
            going.wait(10) if name == "w0" else time.sleep(0.3)
            order.append(name)

        return write

    for i in range(5):
        keeper.submit(slow(f"w{i}"))
    waiter = in_thread(lambda: keeper.mark_started(claimed[0].pk) and order.append("started"))
    time.sleep(0.3)  # the mark is queued while w0 is being written, w1..w4 behind it
    going.set()
    waiter.join(10)
    assert keeper.flush()

    assert order.index("started") < order.index("w2"), order  # right after the write in progress
    assert CheckResult.objects.get(pk=claimed[0].pk).command_started_at is not None


def test_the_heartbeat_is_not_kept_waiting_behind_a_long_write_queue(sim_node: Node, settings: Any) -> None:
    """Thousands of process-group writes queued on a slow database: the leases are still renewed
    every beat, not once the queue is empty (they lapsed, and the reaper closed live work)."""
    settings.KILN_HEARTBEAT_S = 0.2
    settings.KILN_LEASE_TTL_S = 30
    run = services.run_start(cluster=sim_node.cluster, plan=burn_plan(600), enqueue=False)
    claimed = services.results_claim(run_id=run.pk, node_id=sim_node.pk, claim="task-1")
    CheckResult.objects.filter(run=run).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    keeper = leases.LeaseKeeper()
    holding = keeper.hold(claim="task-1", results=claimed, label="n01")
    for _ in range(40):
        keeper.submit(lambda: time.sleep(0.1))  # 4 s of queue

    wait_for(
        lambda: all(r.lease_expires_at > timezone.now() for r in CheckResult.objects.filter(run=run)),
        2,
        "a beat while the queue is being written",
    )
    keeper.release(holding)


def test_process_group_writes_are_coalesced_and_keep_their_meaning(sim_node: Node, monkeypatch) -> None:
    """Each command's group is recorded when it starts and cleared when it ends: written together,
    per result the last state counts, and a clear only clears the group it names."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    run = services.run_start(cluster=sim_node.cluster, plan=burn_plan(600), enqueue=False)
    first, second = services.results_claim(run_id=run.pk, node_id=sim_node.pk, claim="task-1")
    keeper = leases.LeaseKeeper()
    monkeypatch.setattr(keeper, "_ensure_thread", lambda: None)  # written here, by this test

    def pgid(result: CheckResult) -> int | None:
        return CheckResult.objects.get(pk=result.pk).remote_pgid

    keeper.pgid_running(first.pk, 100)
    keeper.pgid_ended(first.pk, 100)  # started and ended before any write: no group
    keeper.pgid_running(second.pk, 200)
    with CaptureQueriesContext(connection) as queries:
        keeper._flush_pgids()
    assert (pgid(first), pgid(second)) == (None, 200)
    assert len(queries.captured_queries) == 1

    keeper.pgid_ended(second.pk, 999)  # not the group it runs: left alone
    keeper._flush_pgids()
    assert pgid(second) == 200
    keeper.pgid_ended(second.pk, 200)
    keeper.pgid_running(first.pk, 300)
    with CaptureQueriesContext(connection) as queries:
        keeper._flush_pgids()
    assert (pgid(first), pgid(second)) == (300, None)
    assert len(queries.captured_queries) == 2  # one UPDATE of the groups set, one of those cleared

    # Only groups that started and ended between two writes: every value set is NULL, which
    # PostgreSQL types as text in a CASE unless it is cast.
    keeper.pgid_running(first.pk, 400)
    keeper.pgid_ended(first.pk, 400)
    keeper._flush_pgids()
    assert pgid(first) is None


def test_a_held_results_group_that_ends_before_any_write_costs_no_write(sim_node: Node, monkeypatch) -> None:
    """The keeper knows what the database holds for the results it holds: a group that started and
    ended between two writes, on a result with no group stored, writes nothing; one whose result
    still holds an earlier attempt's group is written as none."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    run = services.run_start(cluster=sim_node.cluster, plan=burn_plan(600), enqueue=False)
    CheckResult.objects.filter(run=run).update(remote_pgid=None)
    first, second = services.results_claim(run_id=run.pk, node_id=sim_node.pk, claim="task-1")
    CheckResult.objects.filter(pk=second.pk).update(remote_pgid=77)  # an earlier attempt's group
    second.remote_pgid = 77
    keeper = leases.LeaseKeeper()
    monkeypatch.setattr(keeper, "_ensure_thread", lambda: None)  # written here, by this test
    holding = keeper.hold(claim="task-1", results=[first, second], label="n")

    keeper.pgid_running(first.pk, 100)
    keeper.pgid_ended(first.pk, 100)
    with CaptureQueriesContext(connection) as queries:
        keeper._flush_pgids()
    assert queries.captured_queries == []

    keeper.pgid_running(second.pk, 200)
    keeper.pgid_ended(second.pk, 200)
    keeper.pgid_running(first.pk, 300)
    keeper._flush_pgids()
    assert CheckResult.objects.get(pk=second.pk).remote_pgid is None
    assert CheckResult.objects.get(pk=first.pk).remote_pgid == 300
    keeper.pgid_ended(first.pk, 300)  # written as running: its end is written too
    keeper._flush_pgids()
    assert CheckResult.objects.get(pk=first.pk).remote_pgid is None
    monkeypatch.setattr(keeper, "flush", lambda timeout=0: True)
    keeper.release(holding)
    assert keeper._pgid_stored == {}
