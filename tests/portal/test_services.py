"""Run services: snapshots, claims, recording exactly once, fan-in, cancel."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.utils import timezone

from checks.core.base import Measurement as CheckMeasurement
from checks.core.base import Verdict
from checks.gpu.bmc_fru import fru_command
from checks.gpu.inventory import DMI_TIMEOUT_S
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.inventory.models import Cluster
from portal.runs import rawoutput, services
from portal.runs.models import CheckResult, Measurement, Run
from tests.portal.helpers import add_measurement, set_result

pytestmark = pytest.mark.django_db


@pytest.fixture
def inventory_plan(db) -> TestPlan:
    """A one-item plan on a fresh gpu_inventory definition, so layers can be set one by one."""
    definition = CheckDefinition.objects.create(slug="inv", name="Inventory", kind="gpu_inventory")
    plan = TestPlan.objects.create(slug="inv-plan", name="Inventory plan")
    TestPlanItem.objects.create(plan=plan, check_definition=definition, order=0)
    return plan


def _item(snapshot: dict) -> dict:
    (item,) = snapshot["items"]
    return item


def test_it_resolves_each_layer_of_the_snapshot_in_order(cluster, inventory_plan) -> None:
    item = inventory_plan.items.get()
    definition = item.check_definition

    # defaults < profile: H100-SXM-8 expects 8 GPUs of its model, and a driver floor
    thresholds = _item(services.plan_snapshot_build(plan=inventory_plan, cluster=cluster))["thresholds"]
    assert thresholds["expected_gpu_count"] == 8
    assert thresholds["expected_models"] == "NVIDIA H100 80GB HBM3"
    assert thresholds["min_driver"] == "520.61.05"
    assert thresholds["expected_driver"] == ""  # the check's own default

    # profile < definition < item < cluster override
    definition.thresholds = {"min_driver": "530.30.02", "expected_models": "from-definition", "expected_gpu_count": 4}
    definition.params = {"timeout_s": 30}
    definition.save()
    item.threshold_overrides = {"expected_models": "from-item", "expected_driver": "540.1.1"}
    item.param_overrides = {"timeout_s": 20}
    item.save()
    cluster.threshold_overrides = {"gpu_inventory": {"expected_driver": "550.54.15"}}
    cluster.save()

    snapshot = services.plan_snapshot_build(plan=inventory_plan, cluster=cluster)

    resolved = _item(snapshot)
    assert resolved["thresholds"] == {
        "expected_gpu_count": 4,  # definition over profile
        "min_driver": "530.30.02",  # definition over profile
        "expected_models": "from-item",  # item over definition
        "expected_driver": "550.54.15",  # cluster over item
    }
    assert resolved["params"] == {"timeout_s": 20}  # item over definition over default (60)
    # The probe's 20 s (the item's param) and the fixed budgets of the identity reads (DMI, BMC FRU).
    assert resolved["timeout_s"] == 20 + DMI_TIMEOUT_S + fru_command().timeout
    assert resolved["kind"] == "gpu_inventory" and resolved["key"] == "inv"
    assert snapshot["slug"] == "inv-plan" and snapshot["profile"] == "H100-SXM-8"


def test_it_uses_the_clusters_own_profile(inventory_plan) -> None:
    cluster = Cluster.objects.create(name="generic", profile="generic")
    thresholds = _item(services.plan_snapshot_build(plan=inventory_plan, cluster=cluster))["thresholds"]
    assert thresholds["expected_gpu_count"] is None
    assert thresholds["expected_models"] == ""


def test_it_keeps_the_snapshot_when_a_definition_is_edited(cluster, make_run) -> None:
    run = make_run(cluster)
    before = run.plan_snapshot
    definition = CheckDefinition.objects.get(slug="gpu-inventory")
    definition.thresholds = {"expected_driver": "999.1.1"}
    definition.params = {"timeout_s": 5}
    definition.name = "Renamed"
    definition.save()

    run = Run.objects.get(pk=run.pk)

    assert run.plan_snapshot == before
    inventory = next(i for i in run.plan_snapshot["items"] if i["key"] == "gpu-inventory")
    assert inventory["thresholds"]["expected_driver"] == ""
    assert inventory["params"]["timeout_s"] == 60
    assert inventory["name"] == "GPU inventory"
    # ... while a new run sees the edit
    fresh = make_run(cluster)
    assert next(i for i in fresh.plan_snapshot["items"] if i["key"] == "gpu-inventory")["name"] == "Renamed"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"timeout_s": "soon"}, "param 'timeout_s': expected int"),
        ({"no_such_param": 1}, "unknown param(s): no_such_param"),
    ],
)
def test_it_refuses_to_start_with_an_invalid_param_override(
    cluster, quick_plan, django_capture_on_commit_callbacks, overrides, message
) -> None:
    item = quick_plan.items.get(check_definition__slug="ecc-health")
    item.param_overrides = overrides
    item.save()

    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(services.RunStartError) as excinfo:
        services.run_start(cluster=cluster, plan=quick_plan)

    assert message in str(excinfo.value)
    assert "'ecc-health'" in str(excinfo.value)
    assert Run.objects.count() == 0
    assert CheckResult.objects.count() == 0
    assert callbacks == []


def test_it_refuses_a_cluster_without_nodes(quick_plan) -> None:
    empty = Cluster.objects.create(name="empty")
    with pytest.raises(services.RunStartError, match="has no nodes"):
        services.run_start(cluster=empty, plan=quick_plan)
    assert Run.objects.count() == 0


def test_it_refuses_nodes_of_another_cluster(cluster, quick_plan) -> None:
    other = Cluster.objects.create(name="other")
    stranger = other.nodes.create(hostname="x01")
    with pytest.raises(services.RunStartError, match="nodes not in cluster c1: x01"):
        services.run_start(cluster=cluster, plan=quick_plan, nodes=[*cluster.nodes.all(), stranger])
    assert Run.objects.count() == 0


def test_it_creates_one_queued_result_per_node_and_item(cluster, make_run) -> None:
    run = make_run(cluster)
    rows = list(CheckResult.objects.filter(run=run).values_list("node__hostname", "item_key", "position", "status"))
    assert sorted(rows) == sorted(
        (f"n{i:02d}", key, pos, "queued")
        for i in range(1, 5)
        for pos, key in enumerate(["gpu-inventory", "ecc-health"])
    )
    assert run.status == "queued" and run.node_set == "n[01-04]"


def _node(cluster: Cluster, hostname: str):
    return cluster.nodes.get(hostname=hostname)


def test_it_claims_a_nodes_results_once(cluster, make_run) -> None:
    run = make_run(cluster)
    node = _node(cluster, "n01")

    first = services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-a")
    second = services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-b")

    assert [r.item_key for r in first] == ["gpu-inventory", "ecc-health"]
    assert all(r.status == "running" and r.claimed_by == "task-a" and r.attempt == 1 for r in first)
    assert second == []
    assert set(CheckResult.objects.filter(run=run, node=node).values_list("claimed_by", flat=True)) == {"task-a"}
    # other nodes are untouched
    assert CheckResult.objects.filter(run=run, status="queued").count() == 3 * 2


def test_it_runs_nothing_on_a_second_delivery_while_the_first_holds_a_live_lease(cluster, make_run) -> None:
    run = make_run(cluster)
    node = _node(cluster, "n01")
    first = services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-a")
    assert all(r.lease_expires_at > timezone.now() and r.worker_name and r.heartbeat_at for r in first)

    again = services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-a")  # the same message, twice

    assert again == []
    assert set(CheckResult.objects.filter(run=run, node=node).values_list("attempt", flat=True)) == {1}


def _dead_pid() -> int:
    import subprocess

    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_it_takes_over_at_once_what_a_gone_process_of_this_worker_held(cluster, make_run) -> None:
    """A prefork child killed mid-task: its message comes back to a sibling (same Celery node name)
    under the same claim, and the sibling need not wait out the dead child's lease."""
    from portal.runs import leases

    run = make_run(cluster)
    node = _node(cluster, "n01")
    services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-a")
    me, _, _ = leases.worker_name().rpartition(" pid ")
    rows = CheckResult.objects.filter(run=run, node=node)

    rows.update(worker_name=f"other-worker@elsewhere pid {_dead_pid()}")
    assert services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-a") == []  # its lease decides

    rows.update(worker_name=f"{me} pid {os.getpid()}")  # alive (this very process)
    assert services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-a") == []

    rows.update(worker_name=f"{me} pid {_dead_pid()}")
    assert services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-b") == []  # another message
    again = services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-a")
    assert [r.attempt for r in again] == [2, 2]
    assert {r.worker_name for r in again} == {leases.worker_name()}


def test_it_takes_over_running_rows_once_their_lease_has_lapsed(cluster, make_run) -> None:
    run = make_run(cluster)
    node = _node(cluster, "n01")
    first = services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-a")
    services.result_record(result=first[0], claim="task-a", verdict=Verdict("pass", "ok"), measurements=[])
    CheckResult.objects.filter(pk=first[1].pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    again = services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-b")

    assert [r.item_key for r in again] == ["ecc-health"]  # the finished one is not run twice
    assert again[0].attempt == 2 and again[0].status == "running" and again[0].claimed_by == "task-b"
    assert again[0].lease_expires_at > timezone.now() and again[0].command_started_at is None
    assert CheckResult.objects.get(pk=first[0].pk).attempt == 1


def test_it_stops_handing_out_a_check_claimed_three_times(cluster, make_run) -> None:
    """A check whose holders keep dying (it may be what kills them) is left to the reaper to report."""
    from portal.runs import leases

    run = make_run(cluster)
    node = _node(cluster, "n01")
    services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-a")
    CheckResult.objects.filter(run=run, node=node).update(
        attempt=leases.MAX_CLAIMS, lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-b") == []


def test_it_records_a_result_exactly_once(cluster, make_run) -> None:
    run = make_run(cluster)
    node = _node(cluster, "n01")
    result = services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-a")[0]
    measurements = [CheckMeasurement(name="gpu_count", value=8), CheckMeasurement(name="driver_version", text="550")]

    assert services.result_record(
        result=result,
        claim="task-a",
        verdict=Verdict("pass", "all within spec"),
        measurements=measurements,
        command="python3 -",
        stdout="{}",
        exit_code=0,
    )
    assert not services.result_record(
        result=result, claim="task-a", verdict=Verdict("fail", "second"), measurements=measurements
    )
    other = CheckResult.objects.get(run=run, node=node, item_key="ecc-health")  # task-a holds it, running
    assert not services.result_record(
        result=other, claim="task-b", verdict=Verdict("fail", "not my claim"), measurements=measurements
    )

    result.refresh_from_db()
    assert (result.status, result.reason, result.exit_code, result.stdout) == ("pass", "all within spec", 0, "{}")
    assert result.finished_at is not None
    assert Measurement.objects.filter(result=result).count() == 2
    assert CheckResult.objects.get(pk=other.pk).status == "running"
    assert not Measurement.objects.filter(result=other).exists()


def test_it_caps_stored_output(cluster, make_run, settings) -> None:
    settings.KILN_OUTPUT_CAP = 100
    run = make_run(cluster)
    result = services.results_claim(run_id=run.pk, node_id=_node(cluster, "n01").pk, claim="t")[0]
    services.result_record(
        result=result, claim="t", verdict=Verdict("pass", "ok"), measurements=[], stdout="A" * 500 + "END"
    )
    result.refresh_from_db()
    assert result.output_truncated
    assert result.stdout.startswith("A" * 75) and result.stdout.endswith("END")
    assert "403 bytes cut by Kiln from this display copy" in result.stdout
    assert len(result.stdout) < 200
    # The display is cut; the stored raw output is not.
    stored = CheckResult.objects.only("stdout_raw").get(pk=result.pk).stdout_raw
    assert rawoutput.raw_bytes(stored) == b"A" * 500 + b"END"


def _finish_all(run: Run, status: str = "pass") -> None:
    CheckResult.objects.filter(run=run).update(status=status, reason="all within spec")


def test_it_finalizes_a_run_with_its_worst_status(cluster, make_run) -> None:
    run = make_run(cluster)
    _finish_all(run)
    set_result(run, "n02", "ecc-health", "warn", "corrected errors")
    set_result(run, "n03", "ecc-health", "running")

    assert services.run_finalize(run_id=run.pk).status == "queued"  # something is still active

    set_result(run, "n03", "ecc-health", "fail", "uncorrectable")
    finalized = services.run_finalize(run_id=run.pk)

    assert finalized.status == "fail"
    assert finalized.reason == "1 fail, 6 pass, 1 warn"
    assert finalized.finished_at is not None and finalized.started_at is not None
    # a second finalize leaves it alone
    set_result(run, "n04", "ecc-health", "error", "late")
    assert services.run_finalize(run_id=run.pk).status == "fail"


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        (["pass", "pass"], "pass"),
        (["pass", "warn"], "warn"),
        (["fail", "error"], "fail"),  # a proven fault outranks "could not tell"
        (["warn", "error"], "error"),
        (["pass", "skipped"], "pass"),
        (["pass", "cancelled", "fail"], "cancelled"),
    ],
)
def test_it_picks_the_runs_status(cluster, make_run, statuses, expected) -> None:
    run = make_run(cluster, nodes=list(cluster.nodes.all()[: len(statuses)]))
    _finish_all(run)
    for node, status in zip(cluster.nodes.order_by("hostname"), statuses, strict=False):
        set_result(run, node.hostname, "ecc-health", status)
    assert services.run_finalize(run_id=run.pk).status == expected


def _inventory(run: Run, hostname: str, *, driver: str, model: str = "NVIDIA H100 80GB HBM3", count: int = 8) -> None:
    result = CheckResult.objects.get(run=run, node__hostname=hostname, item_key="gpu-inventory")
    add_measurement(result, "driver_version", text=driver)
    add_measurement(result, "gpu_count", value=count)
    for gpu in range(2):
        add_measurement(result, "gpu_model", text=model, gpu=gpu)


def test_it_fails_the_node_whose_inventory_differs_from_the_majority(cluster, make_run) -> None:
    run = make_run(cluster)
    _finish_all(run)
    for hostname in ("n01", "n02", "n04"):
        _inventory(run, hostname, driver="550.54.15")
    _inventory(run, "n03", driver="535.104.05")

    finalized = services.run_finalize(run_id=run.pk)

    odd = CheckResult.objects.get(run=run, node__hostname="n03", item_key="gpu-inventory")
    assert odd.status == "fail"
    assert "driver 535.104.05 differs from 3 of 4 nodes (550.54.15)" in odd.reason
    assert set(CheckResult.objects.filter(run=run).exclude(pk=odd.pk).values_list("status", flat=True)) == {"pass"}
    assert finalized.status == "fail"


def test_it_flags_nothing_without_a_strict_majority(cluster, make_run) -> None:
    run = make_run(cluster, nodes=list(cluster.nodes.order_by("hostname")[:2]))
    _finish_all(run)
    _inventory(run, "n01", driver="550.54.15")
    _inventory(run, "n02", driver="535.104.05")
    assert services.run_finalize(run_id=run.pk).status == "pass"


def test_it_cancels_queued_and_running_results_and_nothing_running_passes_afterwards(cluster, make_run) -> None:
    from portal.runs.models import RunEvent

    run = make_run(cluster)
    node = _node(cluster, "n01")
    claimed = services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-a")

    count = services.run_cancel(run=run, reason="cancelled by otto")

    assert count == 4 * 2
    run.refresh_from_db()
    assert run.status == "cancelled" and run.finished_at is not None  # no check is left to wait for
    assert set(CheckResult.objects.filter(run=run).exclude(node=node).values_list("status", "reason")) == {
        ("cancelled", "cancelled by otto")
    }
    assert set(CheckResult.objects.filter(run=run, node=node).values_list("status", "reason")) == {
        ("cancelled", "cancelled by otto while it ran")
    }
    for result in claimed:  # the task finishing its checks afterwards records nothing
        assert not services.result_record(result=result, claim="task-a", verdict=Verdict("pass", "ok"), measurements=[])
    assert set(CheckResult.objects.filter(run=run).values_list("status", flat=True)) == {"cancelled"}
    log = RunEvent.objects.filter(run=run).exclude(kind="cross_node")  # cross-node: finalize's own line
    assert list(log.values_list("kind", "message")) == [
        ("cancelled", "cancelled by otto: 2 running and 6 queued check(s) cancelled")
    ]
    assert services.run_cancel(run=run) == 0
    assert log.count() == 1


def test_it_closes_a_run_cancelled_before_any_worker_started(cluster, make_run) -> None:
    run = make_run(cluster)
    assert services.run_cancel(run=run) == 8
    run.refresh_from_db()
    assert run.status == "cancelled" and run.finished_at is not None
