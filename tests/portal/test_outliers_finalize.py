"""Fleet outliers applied when a run finishes: pass -> warn with the deviation, fail/error untouched."""

from __future__ import annotations

import pytest

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.inventory.models import Cluster, Node
from portal.runs import services
from portal.runs.models import CheckResult, Measurement, Run
from tests.portal.helpers import add_measurement, set_result

pytestmark = pytest.mark.django_db

BUSBW = [468.0, 470.0, 466.0, 469.0, 467.0, 471.0, 402.0, 300.0]  # g07 lags; g08 fails its threshold


@pytest.fixture
def fleet() -> Cluster:
    cluster = Cluster.objects.create(name="fleet", profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"g{i:02d}") for i in range(1, 9))
    return cluster


def plan_of(*slugs: str) -> TestPlan:
    plan = TestPlan.objects.create(slug="-".join(slugs)[:50], name="outliers")
    for order, slug in enumerate(slugs):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    return plan


def finished_busbw_run(fleet: Cluster, *slugs: str) -> Run:
    run = services.run_start(cluster=fleet, plan=plan_of("nccl-allreduce", *slugs), enqueue=False)
    for i, busbw in enumerate(BUSBW, start=1):
        host = f"g{i:02d}"
        status = "fail" if busbw < 360 else "pass"
        result = set_result(run, host, "nccl-allreduce", status, f"busbw {busbw:.0f} GB/s")
        add_measurement(result, "busbw_peak", value=busbw, unit="GB/s")
    return run


def test_it_marks_a_passing_straggler_warn_with_its_deviation(fleet) -> None:
    run = finished_busbw_run(fleet)

    finalized = services.run_finalize(run_id=run.pk)

    straggler = CheckResult.objects.get(run=run, node__hostname="g07")
    assert straggler.status == "warn"
    assert straggler.reason.startswith("busbw 402 GB/s; outlier: busbw 402 GB/s is 14% below the fleet median")
    assert "468 GB/s (robust z -" in straggler.reason
    z = Measurement.objects.get(result=straggler, name="outlier_z")
    assert z.labels["metric"] == "busbw" and z.value < -3.5 and z.ok is False
    # the failed node keeps its verdict and reason; the healthy ones stay pass
    failed = CheckResult.objects.get(run=run, node__hostname="g08")
    assert (failed.status, failed.reason) == ("fail", "busbw 300 GB/s")
    assert not Measurement.objects.filter(result=failed, name="outlier_z").exists()
    statuses = dict(CheckResult.objects.filter(run=run).values_list("node__hostname", "status"))
    assert [h for h, s in sorted(statuses.items()) if s == "pass"] == ["g01", "g02", "g03", "g04", "g05", "g06"]
    assert finalized.status == "fail" and "1 warn" in finalized.reason


def test_it_leaves_an_errored_result_alone_and_out_of_the_fleet(fleet) -> None:
    run = finished_busbw_run(fleet)
    # g07 could not be judged: its partial value neither moves the median nor gets a warn
    set_result(run, "g07", "nccl-allreduce", "error", "all_reduce_perf timed out")

    services.run_finalize(run_id=run.pk)

    result = CheckResult.objects.get(run=run, node__hostname="g07")
    assert (result.status, result.reason) == ("error", "all_reduce_perf timed out")
    assert not Measurement.objects.filter(result__run=run, name="outlier_z").exists()


def test_it_applies_outliers_once_when_finalize_runs_again(fleet) -> None:
    # A multi-node item keeps the run open after the node checks: finalize runs more than once.
    run = finished_busbw_run(fleet, "fs-aggregate")

    assert services.run_finalize(run_id=run.pk, dispatch=False).status == "queued"
    assert services.run_finalize(run_id=run.pk, dispatch=False).status == "queued"

    straggler = CheckResult.objects.get(run=run, node__hostname="g07")
    assert straggler.status == "warn"
    assert straggler.reason.count("outlier:") == 1
    assert Measurement.objects.filter(result__run=run, name="outlier_z").count() == 1


def test_it_keeps_a_warn_and_appends_each_lagging_metric(fleet) -> None:
    run = services.run_start(cluster=fleet, plan=plan_of("fs-throughput", "burn-in"), enqueue=False)
    for i in range(1, 9):
        host = f"g{i:02d}"
        slow = host == "g03"
        fs = set_result(run, host, "fs-throughput", "warn" if slow else "pass", "fio: 1 job retried" if slow else "")
        add_measurement(fs, "write_bw_sum", value=(3.0e9 if slow else 5.0e9 + i * 1e7), unit="B/s")
        add_measurement(fs, "read_bw_sum", value=(4.0e9 if slow else 6.0e9 - i * 1e7), unit="B/s")
        burn = set_result(run, host, "burn-in", "pass", "ok")
        for gpu in range(8):
            slow_gpu = host == "g05" and gpu == 6
            add_measurement(burn, "gflops", value=90_000.0 if slow_gpu else 110_000.0 + i * 50 + gpu, gpu=gpu)

    services.run_finalize(run_id=run.pk)

    fs = CheckResult.objects.get(run=run, node__hostname="g03", item_key="fs-throughput")
    assert fs.status == "warn"
    assert fs.reason.startswith("fio: 1 job retried; outlier: write 3.00 GB/s is 41% below")
    assert "; outlier: read 4.00 GB/s is 33% below" in fs.reason
    labels = sorted(m.labels["metric"] for m in Measurement.objects.filter(result=fs, name="outlier_z"))
    assert labels == ["read_bw", "write_bw"]
    burn = CheckResult.objects.get(run=run, node__hostname="g05", item_key="burn-in")
    assert burn.status == "warn" and "outlier: slowest GPU 90000 Gflop/s is 18% below" in burn.reason
    assert CheckResult.objects.filter(run=run, status="warn").count() == 2


def test_it_flags_a_hot_node_from_its_steady_load_temperature(fleet) -> None:
    run = services.run_start(cluster=fleet, plan=plan_of("dlc-temperature"), enqueue=False)
    for i in range(1, 9):
        host = f"g{i:02d}"
        result = set_result(run, host, "dlc-temperature", "pass", "8 GPUs under load")
        for gpu in range(8):
            hot = host == "g02" and gpu == 1
            add_measurement(result, "temp_gpu_steady", value=39.0, gpu=gpu, labels={"phase": "idle"})
            add_measurement(
                result, "temp_gpu_steady", value=80.0 if hot else 70.0 + gpu * 0.2, gpu=gpu, labels={"phase": "load"}
            )

    services.run_finalize(run_id=run.pk)

    hot = CheckResult.objects.get(run=run, node__hostname="g02")
    assert hot.status == "warn"
    assert "outlier: hottest GPU under load 80.0 C is 12% above the fleet median 71.4 C" in hot.reason
    assert CheckResult.objects.filter(run=run, status="warn").count() == 1


def test_it_says_nothing_about_a_fleet_of_four(fleet) -> None:
    run = services.run_start(
        cluster=fleet, plan=plan_of("nccl-allreduce"), nodes=list(fleet.nodes.order_by("hostname")[:4]), enqueue=False
    )
    for host, busbw in zip(["g01", "g02", "g03", "g04"], [468.0, 470.0, 469.0, 380.0], strict=True):
        add_measurement(set_result(run, host, "nccl-allreduce", "pass", ""), "busbw_peak", value=busbw)

    assert services.run_finalize(run_id=run.pk).status == "pass"
