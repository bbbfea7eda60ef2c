"""Closing a run: a constant number of queries whatever its size; consensus and outliers exactly
once, outside the run's row lock, also when several workers finish the last results at once."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.inventory.models import Cluster, Node
from portal.runs import finalize, services
from portal.runs.models import CheckResult, Measurement, Run, RunEvent

PLAN = ("gpu-inventory", "ecc-health", "nccl-allreduce")
# Every kind with a consensus, and more with outlier metrics: a plan more than twice as wide.
WIDE = (*PLAN, "sw-consistency", "ib-ports", "topology", "host-bw", "burn-in", "dlc-temperature", "fs-throughput")


def plan(slugs: tuple[str, ...] = PLAN) -> TestPlan:
    made, created = TestPlan.objects.get_or_create(slug=f"fin-{len(slugs)}", defaults={"name": "finalize"})
    if created:
        for order, slug in enumerate(slugs):
            TestPlanItem.objects.create(plan=made, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    return made


def finished_run(size: int, name: str, slugs: tuple[str, ...] = PLAN) -> Run:
    """A run of `size` nodes whose results are all in: one node on an odd driver (consensus fails it),
    one slow on busbw (an outlier), the rest alike, with a row the cross-node checks do not read
    beside those they do. The run itself is still `running`."""
    cluster = Cluster.objects.create(name=name, profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"{name}{i:03d}") for i in range(1, size + 1))
    run = services.run_start(cluster=cluster, plan=plan(slugs), enqueue=False)
    Run.objects.filter(pk=run.pk).update(status="running")
    CheckResult.objects.filter(run=run).update(status="pass", reason="within spec")
    rows = []
    for result in CheckResult.objects.filter(run=run).select_related("node"):
        index = int(result.node.hostname[len(name) :])
        rows.append(Measurement(result=result, name="probe_source", text="nvml"))
        if result.kind in ("gpu_inventory", "sw_consistency"):
            driver = "535.104.05" if index == 2 else "550.54.15"
            rows += [
                Measurement(result=result, name="driver_version", text=driver),
                Measurement(result=result, name="gpu_count", value=8),
            ]
        elif result.kind == "ib_ports":
            rows.append(Measurement(result=result, name="ports_active", value=8, labels={"link_layers": "InfiniBand"}))
        elif result.kind == "topology":
            rows.append(Measurement(result=result, name="nic_count", value=9))
        elif result.kind == "nccl_allreduce":
            rows.append(Measurement(result=result, name="busbw_peak", value=400.0 if index == 3 else 470.0 + index % 3))
        elif result.kind == "burn_in":
            rows += [Measurement(result=result, name="gflops", value=52000.0 + index % 5, gpu=gpu) for gpu in range(8)]
    Measurement.objects.bulk_create(rows)
    return run


def queries_to_close(run: Run) -> int:
    with CaptureQueriesContext(connection) as queries:
        closed = services.run_finalize(run_id=run.pk)
    assert closed.status == "fail", closed.reason  # the odd driver
    return len(queries)


@pytest.mark.django_db
def test_it_closes_a_run_in_the_same_number_of_queries_at_8_and_60_nodes() -> None:
    small, large = finished_run(8, "s"), finished_run(60, "l")

    assert queries_to_close(small) == queries_to_close(large)
    for run, size in ((small, 8), (large, 60)):
        run.refresh_from_db()
        assert run.reason == f"1 fail, {3 * size - 2} pass, 1 warn"
        odd = CheckResult.objects.get(run=run, item_key="gpu-inventory", status="fail")
        assert "differs from" in odd.reason
        slow = CheckResult.objects.get(run=run, item_key="nccl-allreduce", status="warn")
        assert "outlier: busbw" in slow.reason


@pytest.mark.django_db
def test_it_closes_in_the_same_number_of_queries_whatever_the_size_and_the_plan_width() -> None:
    counts = {
        (size, len(slugs)): queries_to_close(finished_run(size, f"w{len(slugs)}n{size}-", slugs))
        for size in (8, 30)
        for slugs in (PLAN, WIDE)
    }

    assert len(set(counts.values())) == 1, counts
    wide = Run.objects.get(cluster__name="w10n30-")
    # Consensus failed the odd driver in both results that record it; the slow node is the outlier.
    assert wide.reason == f"2 fail, {10 * 30 - 3} pass, 1 warn"
    odd = CheckResult.objects.filter(run=wide, status="fail").order_by("item_key")
    assert [(r.item_key, r.node.hostname) for r in odd] == [
        ("gpu-inventory", "w10n30-002"),
        ("sw-consistency", "w10n30-002"),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("declared", "read"),
    [
        ("declared", {"driver_version", "gpu_count"}),  # what the inventory's consensus compares, no more
        (None, {"driver_version", "gpu_count", "probe_source"}),  # no names declared: every row
    ],
)
def test_a_consensus_reads_the_rows_its_check_declares(monkeypatch, declared: str | None, read: set[str]) -> None:
    from checks.gpu.inventory import GpuInventory

    seen: list[set[str]] = []
    real = GpuInventory.consensus.__func__  # type: ignore[attr-defined]

    def consensus(cls: type[GpuInventory], per_node: dict) -> dict[str, str]:
        seen.append({m.name for rows in per_node.values() for m in rows})
        return real(cls, per_node)

    if declared is None:
        monkeypatch.setattr(GpuInventory, "consensus_names", None)
    monkeypatch.setattr(GpuInventory, "consensus", classmethod(consensus))
    run = finished_run(8, "a")

    queries_to_close(run)
    assert seen == [read]
    assert CheckResult.objects.get(run=run, item_key="gpu-inventory", status="fail").node.hostname == "a002"


@pytest.mark.django_db
def test_it_logs_the_cross_node_pass_once_and_is_idempotent() -> None:
    run = finished_run(8, "i")
    services.run_finalize(run_id=run.pk)
    Run.objects.filter(pk=run.pk).update(status="running")  # as if a finaliser ran again before it closed
    services.run_finalize(run_id=run.pk)

    (event,) = RunEvent.objects.filter(run=run, kind=finalize.CROSS_NODE_EVENT)
    assert event.message == "cross-node checks applied: 1 result(s) failed by consensus, 1 fleet outlier(s)"
    assert CheckResult.objects.get(run=run, item_key="gpu-inventory", status="fail").reason.count("differs") == 1
    assert Measurement.objects.filter(result__run=run, name="outlier_z").count() == 1


@pytest.mark.django_db
def test_it_rolls_a_failed_cross_node_pass_back_and_redoes_it_next_time(monkeypatch) -> None:
    run = finished_run(8, "r")
    real = finalize._outlier_z_create

    def lost_connection(rows: list[Measurement]) -> None:
        # After the results' UPDATE (the consensus fail, the outlier warn): the connection drops.
        assert CheckResult.objects.filter(run=run, status="fail").exists()
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(finalize, "_outlier_z_create", lost_connection)
    with pytest.raises(OperationalError):
        services.run_finalize(run_id=run.pk)
    assert not RunEvent.objects.filter(run=run).exists()
    assert not CheckResult.objects.filter(run=run, status="fail").exists()  # consensus rolled back too
    assert not CheckResult.objects.filter(run=run, status="warn").exists()
    assert Run.objects.get(pk=run.pk).status == "running"

    monkeypatch.setattr(finalize, "_outlier_z_create", real)
    assert services.run_finalize(run_id=run.pk).status == "fail"
    assert RunEvent.objects.filter(run=run, kind=finalize.CROSS_NODE_EVENT).count() == 1
    assert Measurement.objects.filter(result__run=run, name="outlier_z").count() == 1


@pytest.mark.django_db
def test_it_closes_the_run_when_a_cross_node_check_has_a_bug(monkeypatch) -> None:
    run = finished_run(8, "b")

    def bug(run: Run) -> int:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(finalize, "_apply_consensus", bug)
    closed = services.run_finalize(run_id=run.pk)

    assert closed.status == "pass"  # judged by the node results alone: no consensus fail, no outlier warn
    (event,) = RunEvent.objects.filter(run=run)
    assert event.message == "cross-node checks not applied: internal error in Kiln: ZeroDivisionError: division by zero"


def _in_thread(target: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        try:
            target()
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_it_runs_cross_node_checks_outside_the_run_row_lock(monkeypatch, real_services) -> None:
    run = finished_run(8, "o")
    inside, release = threading.Event(), threading.Event()
    real = finalize._apply_outliers

    def slow(run: Run) -> int:
        inside.set()
        assert release.wait(30)
        return real(run)

    monkeypatch.setattr(finalize, "_apply_outliers", slow)
    first = _in_thread(lambda: services.run_finalize(run_id=run.pk))
    assert inside.wait(30)
    second = _in_thread(lambda: services.run_finalize(run_id=run.pk))  # another worker finishing at once
    try:
        # While the cross-node pass runs, the run's row is free: cancel, the pages, other tasks go on.
        with transaction.atomic():
            Run.objects.select_for_update(nowait=True).get(pk=run.pk)
    finally:
        release.set()
        first.join(30)
        second.join(30)
    assert not first.is_alive() and not second.is_alive()

    assert Run.objects.get(pk=run.pk).status == "fail"
    assert RunEvent.objects.filter(run=run, kind=finalize.CROSS_NODE_EVENT).count() == 1
    assert CheckResult.objects.get(run=run, item_key="gpu-inventory", status="fail").reason.count("differs") == 1
    assert Measurement.objects.filter(result__run=run, name="outlier_z").count() == 1


@pytest.mark.django_db(transaction=True)
def test_it_applies_consensus_once_when_many_workers_finish_at_once(real_services) -> None:
    run = finished_run(12, "m")
    start = threading.Barrier(6)
    closed: list[str] = []

    def finish() -> None:
        start.wait(10)
        closed.append(services.run_finalize(run_id=run.pk).status)

    threads = [_in_thread(finish) for _ in range(6)]
    for thread in threads:
        thread.join(60)

    assert closed == ["fail"] * 6
    assert RunEvent.objects.filter(run=run, kind=finalize.CROSS_NODE_EVENT).count() == 1
    assert CheckResult.objects.get(run=run, item_key="gpu-inventory", status="fail").reason.count("differs") == 1
    assert Measurement.objects.filter(result__run=run, name="outlier_z").count() == 1
    assert Run.objects.get(pk=run.pk).reason == "1 fail, 34 pass, 1 warn"


def digest_results(run: Run, every: int = 1) -> int:
    """Give every `every`-th result the cross-node digest a node task stores when it records it,
    made from its measurements as they are stored (the rest stay as an older Kiln left them)."""
    from portal.runs import crossnode

    digested = 0
    for n, result in enumerate(CheckResult.objects.filter(run=run).order_by("pk")):
        if n % every:
            continue
        rows = [
            (m.name, m.value, m.text, m.unit, m.gpu, m.threshold, m.ok, m.labels)
            for m in Measurement.objects.filter(result=result).order_by("pk")
        ]
        CheckResult.objects.filter(pk=result.pk).update(cross_node=crossnode.digest(result.kind, rows))
        digested += 1
    return digested


def outcome(run: Run) -> tuple[str, list[tuple[str, str, str, str]], list[tuple[str, str, dict]]]:
    """What closing did to a run: its reason, every result's status and reason, the outlier marks."""
    run.refresh_from_db()
    results = sorted(
        (r.node.hostname, r.item_key, r.status, r.reason)
        for r in CheckResult.objects.filter(run=run).select_related("node")
    )
    marks = sorted(
        (m.result.node.hostname, m.result.item_key, m.labels)
        for m in Measurement.objects.filter(result__run=run, name=finalize.OUTLIER_Z).select_related("result__node")
    )
    return run.reason, results, marks


@pytest.mark.django_db
def test_the_digests_results_keep_close_a_run_as_reading_their_measurements_does() -> None:
    # The same run three times (hostnames aside): measurements only, every result digested, and
    # every other one (a run recorded partly by an older Kiln).
    runs = {every: finished_run(12, f"d{every}-", WIDE) for every in (0, 1, 2)}
    for every, run in runs.items():
        if every:
            assert digest_results(run, every) == (10 * 12) // every
    outcomes = {}
    for every, run in runs.items():
        queries_to_close(run)
        reason, results, marks = outcome(run)
        prefix = f"d{every}-"
        outcomes[every] = (
            reason,
            [(h.removeprefix(prefix), *rest) for h, *rest in results],
            [(h.removeprefix(prefix), *rest) for h, *rest in marks],
        )

    assert outcomes[1] == outcomes[0] == outcomes[2]
    reason, results, marks = outcomes[1]
    assert reason == f"2 fail, {10 * 12 - 3} pass, 1 warn"
    assert [(h, key) for h, key, status, _ in results if status == "fail"] == [
        ("002", "gpu-inventory"),
        ("002", "sw-consistency"),
    ]
    assert [(h, key, labels["metric"]) for h, key, labels in marks] == [("003", "nccl-allreduce", "busbw")]


@pytest.mark.django_db
def test_with_digests_it_reads_no_measurement_but_the_outlier_marks() -> None:
    run = finished_run(8, "m", WIDE)
    digest_results(run)

    with CaptureQueriesContext(connection) as queries:
        finalize.cross_node_apply(run=run)

    read = [q["sql"] for q in queries.captured_queries if 'FROM "runs_measurement"' in q["sql"]]
    assert len(read) == 1 and "outlier_z" in read[0], read  # the marks already made, by name
    assert CheckResult.objects.get(run=run, item_key="nccl-allreduce", status="warn").node.hostname == "m003"


@pytest.mark.django_db
def test_a_result_recorded_keeps_what_the_cross_node_checks_read_of_it() -> None:
    from checks.core.base import Measurement as CheckMeasurement
    from checks.core.base import Verdict

    run = finished_run(3, "r", WIDE)
    inventory = CheckResult.objects.get(run=run, item_key="gpu-inventory", node__hostname="r001")
    burn = CheckResult.objects.get(run=run, item_key="burn-in", node__hostname="r001")
    ecc = CheckResult.objects.get(run=run, item_key="ecc-health", node__hostname="r001")
    CheckResult.objects.filter(pk__in=[inventory.pk, burn.pk, ecc.pk]).update(status="running", claimed_by="t")
    nan = float("nan")
    recorded = {
        inventory: [
            CheckMeasurement(name="gpu_count", value=8),  # an int: kept as the float column stores it
            CheckMeasurement(name="driver_version", text="550.54.15\x00"),  # its NUL escaped, as stored
            CheckMeasurement(name="gpu_model", text="H100", gpu=1),
            CheckMeasurement(name="gpu_model", text="H100", gpu=0),
            CheckMeasurement(name="probe_source", text="nvml"),  # not declared: left out
        ],
        burn: [CheckMeasurement(name="gflops", value=v, gpu=g) for g, v in enumerate((51000.0, 49000.0, nan))],
        ecc: [CheckMeasurement(name="ecc_uncorrected", value=0)],
    }
    for result, measurements in recorded.items():
        result.refresh_from_db()
        assert services.result_record(
            result=result, claim="t", verdict=Verdict(status="pass", reason=""), measurements=measurements
        )

    stored = dict(CheckResult.objects.filter(run=run).defer(None).values_list("pk", "cross_node"))
    assert stored[inventory.pk] == {
        "facts": [
            ["gpu_model", None, "", 0, "H100", "", None, {}],
            ["gpu_model", None, "", 1, "H100", "", None, {}],
            ["driver_version", None, "", None, "550.54.15\\x00", "", None, {}],
            ["gpu_count", 8.0, "", None, "", "", None, {}],
        ]
    }
    assert stored[burn.pk] == {"metrics": {"gflops": 49000.0}}  # the slowest GPU; NaN is not a value
    assert stored[ecc.pk] is None  # no cross-node check reads it
