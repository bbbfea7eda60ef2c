"""The reaper's liveness rules (portal/execution/reaper.py), run through kiln.reap's service: lapsed
leases, lost messages, and process groups left on nodes. The broker and the task senders are
fakes here; tests/faults runs the same rules against a real worker, Redis and sshd nodes."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.execution.reaper import MAX_ATTEMPTS, reap
from portal.inventory.models import Cluster, Node
from portal.runs import services
from portal.runs.models import CheckResult, Run, RunEvent
from tests.worker.test_ssh import live_members

pytestmark = pytest.mark.django_db


def node(cluster: Cluster, hostname: str) -> Node:
    return cluster.nodes.get(hostname=hostname)


def lapse(run: Run, hostname: str, *, started: set[str], attempt: int = 1) -> list[CheckResult]:
    """n's results held by a worker whose last heartbeat was 45 s ago (lease 30 s: lapsed)."""
    beat = timezone.now() - timedelta(seconds=45)
    rows = services.results_claim(run_id=run.pk, node_id=node(run.cluster, hostname).pk, claim="dead-task")
    CheckResult.objects.filter(pk__in=[r.pk for r in rows]).update(
        heartbeat_at=beat,
        lease_expires_at=beat + timedelta(seconds=30),
        worker_name="celery@w1 pid 42",
        attempt=attempt,
    )
    CheckResult.objects.filter(pk__in=[r.pk for r in rows], item_key__in=started).update(command_started_at=beat)
    return rows


def test_it_errors_a_started_check_and_requeues_the_rest_when_a_lease_lapses(
    cluster, make_run, sent, no_broker, django_capture_on_commit_callbacks
) -> None:
    run = make_run(cluster)
    lapse(run, "n01", started={"gpu-inventory"})

    with django_capture_on_commit_callbacks(execute=True):
        assert reap() == [run.pk]

    started = CheckResult.objects.get(run=run, node__hostname="n01", item_key="gpu-inventory")
    fresh = CheckResult.objects.get(run=run, node__hostname="n01", item_key="ecc-health")
    assert started.status == "error" and started.portal_fault
    assert started.reason.startswith("worker lost: celery@w1 pid 42, last heartbeat 20")
    assert started.reason.endswith(" UTC")
    assert fresh.status == "queued" and fresh.claimed_by == "" and fresh.lease_expires_at > timezone.now()
    assert sent == [("node", {"run_id": run.pk, "node_id": node(cluster, "n01").pk})]
    kinds = list(RunEvent.objects.filter(run=run).values_list("kind", "message"))
    assert [k for k, _ in kinds] == ["worker lost", "re-enqueued"]
    assert kinds[0][1].startswith("n01: gpu-inventory marked error (worker lost: celery@w1 pid 42")
    assert kinds[1][1].startswith("n01: ecc-health had not started when its worker was lost")
    # The next delivery claims the queued check and runs it; the errored one is never run again.
    again = services.results_claim(run_id=run.pk, node_id=node(cluster, "n01").pk, claim="task-2")
    assert [r.item_key for r in again] == ["ecc-health"]


def test_it_leaves_a_live_lease_alone_however_long_the_check_runs(cluster, make_run, sent, no_broker) -> None:
    """11 h into a 12 h burn-in, its worker alive: nothing to do (the deadline is a backstop)."""
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

    plan = TestPlan.objects.create(slug="soak", name="soak")
    TestPlanItem.objects.create(
        plan=plan, check_definition=CheckDefinition.objects.get(slug="burn-in"), param_overrides={"duration_s": 43200}
    )
    run = make_run(cluster, plan=plan)
    rows = lapse(run, "n01", started={"burn-in"})
    CheckResult.objects.filter(pk__in=[r.pk for r in rows]).update(
        started_at=timezone.now() - timedelta(hours=11), lease_expires_at=timezone.now() + timedelta(seconds=20)
    )
    assert reap() == []
    assert CheckResult.objects.get(pk=rows[0].pk).status == "running"
    assert not RunEvent.objects.exists() and sent == []


def test_it_stops_handing_out_a_check_whose_workers_keep_dying(cluster, make_run, sent, no_broker) -> None:
    run = make_run(cluster)
    lapse(run, "n01", started=set(), attempt=MAX_ATTEMPTS)
    reap()
    rows = CheckResult.objects.filter(run=run, node__hostname="n01")
    assert set(rows.values_list("status", flat=True)) == {"error"}
    assert f"not retried after {MAX_ATTEMPTS} claims" in rows.first().reason
    assert sent == []


def test_it_resends_a_group_check_that_had_not_started(
    cluster, make_run, sent, no_broker, django_capture_on_commit_callbacks
) -> None:
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

    plan = TestPlan.objects.create(slug="multi", name="multi")
    TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug="nccl-allreduce-multi"))
    run = make_run(cluster, plan=plan)
    group = CheckResult.objects.get(run=run, scope="group")
    CheckResult.objects.filter(pk=group.pk).update(claimed_by="dispatched")
    claimed = services.group_result_claim(result_id=group.pk, claim="dead-task")
    assert claimed is not None
    CheckResult.objects.filter(pk=group.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    with django_capture_on_commit_callbacks(execute=True):
        reap()

    group.refresh_from_db()
    assert group.status == "queued" and group.claimed_by == "dispatched" and group.attempt == 1
    assert sent == [("group", {"run_id": run.pk, "result_id": group.pk})]


def overdue(run: Run, seconds: float = 5) -> None:
    """The run's queued checks were sent KILN_LOST_MESSAGE_S + `seconds` ago."""
    CheckResult.objects.filter(run=run, status="queued").update(
        lease_expires_at=timezone.now() - timedelta(seconds=seconds)
    )


def test_it_resends_a_lost_message_but_not_one_waiting_in_the_broker(
    cluster, make_run, sent, no_broker, django_capture_on_commit_callbacks
) -> None:
    run = make_run(cluster)
    overdue(run)
    waiting = node(cluster, "n02")
    no_broker["pending"] = {("kiln.run_node", (run.pk, waiting.pk)), ("kiln.run_node", (run.pk + 1, 1))}

    with django_capture_on_commit_callbacks(execute=True):
        assert reap() == [run.pk]

    resent = sorted(kw["node_id"] for _, kw in sent)
    assert resent == sorted(n.pk for n in cluster.nodes.exclude(pk=waiting.pk))
    assert all(r.lease_expires_at > timezone.now() for r in CheckResult.objects.filter(run=run))
    messages = list(RunEvent.objects.filter(run=run, kind="re-enqueued").values_list("message", flat=True))
    assert len(messages) == 3 and not any(m.startswith("n02") for m in messages)
    assert messages[0].endswith("queued check(s) waited 65 s with no task in the broker; sent again")  # 60 + 5
    # A second round finds nothing overdue: no message is sent twice.
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        reap()
    assert sent == []


def test_it_resends_on_time_alone_when_the_broker_cannot_be_asked(
    cluster, make_run, sent, no_broker, django_capture_on_commit_callbacks
) -> None:
    run = make_run(cluster, nodes=[node(cluster, "n01")])
    overdue(run)
    no_broker["pending"] = None
    with django_capture_on_commit_callbacks(execute=True):
        reap()
    assert [kw["node_id"] for _, kw in sent] == [node(cluster, "n01").pk]
    assert "(the broker cannot be inspected)" in RunEvent.objects.get(run=run).message


def test_it_leaves_a_queue_that_is_not_overdue_alone(cluster, make_run, sent, no_broker) -> None:
    run = make_run(cluster)
    CheckResult.objects.filter(run=run).update(lease_expires_at=timezone.now() + timedelta(seconds=5))
    no_broker["pending"] = None
    assert reap() == [] and sent == []


@pytest.fixture
def tagged_sleep() -> Iterator[Callable[[int, int], int]]:
    """Starts a process group on this host (the local transport's node) carrying a result's tag."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(result_id: int, attempt: int) -> int:
        env = {**os.environ, "KILN_TAG": f"{result_id}.{attempt}"}
        processes.append(subprocess.Popen(["sleep", "120"], env=env, start_new_session=True))
        return processes[-1].pid

    yield start
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


def orphan(run: Run, hostname: str, pgid: int, *, started_ago_s: float = 10) -> CheckResult:
    result = CheckResult.objects.get(run=run, node__hostname=hostname, item_key="ecc-health")
    CheckResult.objects.filter(pk=result.pk).update(
        status="error",
        reason="worker lost",
        attempt=1,
        remote_pgid=pgid,
        command_started_at=timezone.now() - timedelta(seconds=started_ago_s),
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    return CheckResult.objects.get(pk=result.pk)


def test_it_stops_a_process_group_a_lost_worker_left_on_its_node(
    cluster, make_run, sent, no_broker, tagged_sleep
) -> None:
    start = tagged_sleep
    run = make_run(cluster, nodes=[node(cluster, "n01")])
    result = CheckResult.objects.get(run=run, item_key="ecc-health")
    pgid = start(result.pk, 1)
    orphan(run, "n01", pgid)

    reap()

    assert live_members(pgid) == []
    assert CheckResult.objects.get(pk=result.pk).remote_pgid is None
    event = RunEvent.objects.get(run=run)
    assert event.kind == "processes stopped"
    assert event.message == (
        f"ecc-health on n01 (error, lease lapsed): process group {pgid} ended on SIGTERM; "
        "stopped over a new connection by the reaper"
    )


def test_it_forgets_a_process_group_its_own_time_limit_has_ended(
    cluster, make_run, sent, no_broker, tagged_sleep
) -> None:
    start = tagged_sleep
    run = make_run(cluster, nodes=[node(cluster, "n01")])
    result = CheckResult.objects.get(run=run, item_key="ecc-health")
    pgid = start(result.pk, 1)
    budget = next(i["timeout_s"] for i in run.plan_snapshot["items"] if i["key"] == "ecc-health")
    orphan(run, "n01", pgid, started_ago_s=budget + 60)

    reap()

    assert CheckResult.objects.get(pk=result.pk).remote_pgid is None
    assert live_members(pgid, wait_s=0)  # not signalled: the node's own `timeout` owns it by now
    assert not RunEvent.objects.filter(run=run).exists()


def test_it_keeps_trying_an_unreachable_node_and_says_so_once(cluster, make_run, sent, no_broker) -> None:
    far = Cluster.objects.create(name="far", transport="ssh", ssh_user="root", profile="H100-SXM-8")
    Node.objects.create(cluster=far, hostname="gone01", address="127.0.0.1", ssh_port=1)
    run = make_run(far)
    result = orphan(run, "gone01", 4242)

    reap()
    reap()

    assert CheckResult.objects.get(pk=result.pk).remote_pgid == 4242  # tried again next round
    event = RunEvent.objects.get(run=run)
    assert event.kind == "stop failed"
    assert event.message.startswith(f"ecc-health on gone01 (result #{result.pk}): could not stop process group 4242")
