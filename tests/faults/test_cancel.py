"""Cancel mid-run (`kiln_cancel`): the worker holding the checks notices at its next heartbeat and
stops their process groups on the nodes over its open connection, within ten seconds; every
check ends `cancelled` and nothing still running is recorded afterwards. A burn-in on two nodes,
and a multi-node NCCL check on its launcher."""

from __future__ import annotations

import json
import threading
import time
from io import StringIO

import pytest
from django.core.management import call_command

from checks.core.base import Command
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.execution.execution import node_target
from portal.runs import leases, services
from portal.runs.models import CheckResult, Run, RunEvent
from tests.faults.conftest import state_file
from tests.faults.helpers import sim_processes, wait_for
from worker.ssh import SSHTransport

pytestmark = pytest.mark.integration


def cancel(run: Run) -> dict:
    out = StringIO()
    call_command("kiln_cancel", str(run.pk), "--json", stdout=out)
    return json.loads(out.getvalue())


def test_it_stops_a_burn_in_within_ten_seconds_of_cancel(testbed_cluster, clean_testbed, processes, soak_plan) -> None:
    processes("worker", concurrency=2)
    hosts = ("gpu07", "gpu08")
    run = services.run_start(
        cluster=testbed_cluster, plan=soak_plan(3600), nodes=list(testbed_cluster.nodes.filter(hostname__in=hosts))
    )
    burns = CheckResult.objects.filter(run=run, item_key="burn-in")
    wait_for(
        lambda: (
            all(sim_processes(state_file(clean_testbed, h), "gpu_burn") for h in hosts)
            and all(burns.values_list("remote_pgid", flat=True))
        ),
        90,
        "gpu_burn to run on both nodes",
    )

    started = time.monotonic()
    assert cancel(run) == {"run": run.pk, "status": "cancelled", "cancelled": 4}
    wait_for(
        lambda: not any(sim_processes(state_file(clean_testbed, h), "gpu_burn") for h in hosts),
        20,
        "gpu_burn to stop on both nodes",
    )
    took = time.monotonic() - started
    print(f"cancel: the node-side processes were gone {took:.1f} s later")

    assert took < 10, f"gpu_burn ran {took:.1f} s after the cancel"
    wait_for(lambda: RunEvent.objects.filter(run=run, kind="processes stopped").count() == 2, 10, "the log lines")
    time.sleep(2)  # whatever the worker still does, nothing is recorded over the cancel
    assert set(CheckResult.objects.filter(run=run).values_list("status", flat=True)) == {"cancelled"}
    assert Run.objects.get(pk=run.pk).status == "cancelled"
    for message in RunEvent.objects.filter(run=run, kind="processes stopped").values_list("message", flat=True):
        assert message.startswith(("burn-in on gpu07 (cancelled): process group ", "burn-in on gpu08 (cancelled)"))
    assert not burns.exclude(remote_pgid=None).exists()


def test_it_stops_a_multi_node_check_on_its_launcher(testbed_cluster, clean_testbed, processes) -> None:
    hosts = ("gpu01", "gpu02", "gpu03")
    for host in hosts:
        clean_testbed.set_faults(host, nccl_run_s=600)  # a ten-minute collective
    plan = TestPlan.objects.create(slug="nccl-long", name="NCCL across nodes")
    TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug="nccl-allreduce-multi"))
    processes("worker", concurrency=2)
    run = services.run_start(
        cluster=testbed_cluster, plan=plan, nodes=list(testbed_cluster.nodes.filter(hostname__in=hosts))
    )
    launcher = state_file(clean_testbed, "gpu01")
    wait_for(lambda: sim_processes(launcher, "all_reduce_perf"), 60, "all_reduce_perf to run on the launcher")

    started = time.monotonic()
    assert cancel(run)["cancelled"] == 1
    wait_for(lambda: not sim_processes(launcher, "all_reduce_perf"), 20, "all_reduce_perf to stop")
    took = time.monotonic() - started
    print(f"cancel: the node-side processes were gone {took:.1f} s later")

    assert took < 10, f"all_reduce_perf ran {took:.1f} s after the cancel"
    group = CheckResult.objects.get(run=run, scope="group")
    assert group.status == "cancelled"
    stopped = wait_for(lambda: RunEvent.objects.filter(run=run, kind="processes stopped").first(), 10, "the log line")
    assert stopped is not None
    message = RunEvent.objects.get(run=run, kind="processes stopped").message
    assert message.startswith("nccl-allreduce-multi on launcher gpu01 (cancelled): process group ")


def test_it_stops_over_a_new_connection_when_the_node_allows_one_session(testbed_cluster, clean_testbed) -> None:
    """sshd with MaxSessions 1: the running command holds the task's only session, so the stop goes
    over a second connection, as fast."""
    node = clean_testbed.node("gpu06")
    config = node.sshd_config_path.read_text()
    node.sshd_config_path.write_text(config.replace("MaxSessions 50", "MaxSessions 1"))
    clean_testbed.restart_sshd("gpu06")
    gpu06 = testbed_cluster.nodes.get(hostname="gpu06")
    run = services.run_start(cluster=testbed_cluster, plan=TestPlan.objects.get(slug="itest"), nodes=[gpu06])
    claimed = services.results_claim(run_id=run.pk, node_id=gpu06.pk, claim="task-1")
    outcome: list[object] = []
    try:
        with leases.held(claim="task-1", results=claimed, label="gpu06") as holding:
            transport = holding.track(SSHTransport(node_target(gpu06)))
            holding.begin(claimed[0])

            def run_long() -> None:
                try:
                    outcome.append(transport.run(Command(argv=("sleep", "120"), timeout=300)))
                except leases.CheckStopped as exc:
                    outcome.append(exc)

            thread = threading.Thread(target=run_long, daemon=True)
            thread.start()
            wait_for(lambda: CheckResult.objects.get(pk=claimed[0].pk).remote_pgid, 20, "the command to run")
            started = time.monotonic()
            holding.saw_closed({claimed[0].pk: "cancelled"})
            thread.join(20)
            took = time.monotonic() - started
            transport.close()
    finally:
        node.sshd_config_path.write_text(config)
        clean_testbed.restart_sshd("gpu06")

    assert isinstance(outcome[0], leases.CheckStopped) and took < 10
    message = RunEvent.objects.get(run=run, kind="processes stopped").message
    assert message.startswith("gpu-inventory on gpu06 (cancelled): process group ") and "ended on SIGTERM" in message
