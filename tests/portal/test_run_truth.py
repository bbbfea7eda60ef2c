"""One truth per run: the run page's badges, its triage box, the runs list and the API count the same
cells; a multi-node check's duration is its wall time; a run of multi-node checks only has a real
start; a node a multi-node check judged is "checked" on the cluster page as it is "healthy" on the
health page; the ETA counts a running multi-node check down."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from checks.core.base import Command, CommandOutput, Verdict
from portal.api.serializers import RunDetailSerializer
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.health.models import NodeHealth
from portal.health.services.state import health_evaluate_run
from portal.runs import cells, selectors, services
from portal.runs.models import CheckResult, Run, Scope
from tests.portal.helpers import set_result

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer_client(client, make_user):
    client.force_login(make_user("vera", "viewer"))
    return client


def with_group(plan: TestPlan, slug: str = "fs-aggregate") -> TestPlan:
    TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=9)
    return plan


def badges(html: str, where: str = "run-counts") -> dict[str, int]:
    block = re.search(rf'<p id="{where}">(.*?)</p>', html, re.S)
    assert block, where
    return {state: int(n) for n, state in re.findall(r'<span class="badge \w+">(\d+) (\w+)</span>', block.group(1))}


def listed(cluster_name: str, run: Run, client) -> tuple[int, int, int]:
    page = client.get(reverse("history:cluster_runs", args=[cluster_name])).context["page"]
    row = next(r for r in page if r.pk == run.pk)
    return row.n_pass, row.n_fail, row.n_results


def test_a_group_result_counts_once_per_node_on_the_run_page_triage_runs_list_and_api(
    viewer_client, cluster, quick_plan
) -> None:
    run = services.run_start(cluster=cluster, plan=with_group(quick_plan), enqueue=False)
    Run.objects.filter(pk=run.pk).update(status="running", started_at=timezone.now() - timedelta(minutes=2))
    CheckResult.objects.filter(run=run, scope=Scope.NODE).update(status="pass")
    set_result(run, "n02", "ecc-health", "fail", "GPU 1: 3 uncorrectable")
    set_result(run, "n04", "ecc-health", "queued")  # mid-way: one node check still to run
    group = CheckResult.objects.get(run=run, scope=Scope.GROUP)
    attribution = {h: {"status": "pass", "reason": "within spec"} for h in ("n01", "n02", "n04")}
    attribution["n03"] = {"status": "fail", "reason": "write 1.2 GB/s, limit >= 4 GB/s"}
    CheckResult.objects.filter(pk=group.pk).update(status="fail", reason="n03 slow", attribution=attribution)
    run.refresh_from_db()
    # 4 nodes x 2 node checks + the group's 4 cells: 9 pass, 2 fail, 1 queued of 12.
    expected = {"pass": 9, "fail": 2, "queued": 1}

    assert cells.run_counts(run=run).cells == expected
    html = viewer_client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
    assert badges(html) == expected
    assert "11/12 checks (91%)" in html
    assert badges(html, "triage-counts") == {"fail": 2, "error": 0}
    assert "of 12 checks so far" in html and "Nothing to triage" not in html
    assert listed("c1", run, viewer_client) == (9, 2, 12)
    progress = RunDetailSerializer(run).data["progress"]
    assert progress["counts"] == expected and progress["total"] == 12 and progress["done"] == 11

    set_result(run, "n04", "ecc-health", "pass")
    services.run_finalize(run_id=run.pk, dispatch=False)
    run.refresh_from_db()
    assert run.summary["cells"] == {"pass": 10, "fail": 2}
    assert listed("c1", run, viewer_client) == (10, 2, 12)  # from the summary, counted the same way
    assert RunDetailSerializer(run).data["progress"]["counts"] == {"pass": 10, "fail": 2}
    html = viewer_client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
    assert badges(html) == {"pass": 10, "fail": 2} and badges(html, "triage-counts") == {"fail": 2, "error": 0}


def claimed_group(run: Run, claim: str = "t-group") -> CheckResult:
    group = CheckResult.objects.get(run=run, scope=Scope.GROUP)
    CheckResult.objects.filter(pk=group.pk).update(claimed_by="dispatched")
    claimed = services.group_result_claim(result_id=group.pk, claim=claim)
    assert claimed is not None
    return claimed


def test_a_group_checks_duration_is_its_wall_time_not_the_sum_over_its_nodes(cluster, quick_plan) -> None:
    run = services.run_start(cluster=cluster, plan=with_group(quick_plan), enqueue=False)
    result = claimed_group(run)
    result.started_at = timezone.now() - timedelta(seconds=30)
    CheckResult.objects.filter(pk=result.pk).update(started_at=result.started_at)
    # Four nodes wrote side by side for 28 s each: 112 s summed, 30 s of wall time.
    outputs = [
        CommandOutput(
            command=Command(argv=("fio", f"n0{i}"), timeout=60.0), stdout="", stderr="", exit_code=0, duration_s=28.0
        )
        for i in range(1, 5)
    ]

    services.record_from_check(
        result=result, claim="t-group", verdict=Verdict(status="pass", reason=""), measurements=[], outputs=outputs
    )

    result.refresh_from_db()
    assert result.duration_s == pytest.approx(30.0, abs=2.0)
    assert result.duration_s == pytest.approx((result.finished_at - result.started_at).total_seconds())


def test_a_run_of_group_checks_only_records_when_it_started_and_finished(cluster) -> None:
    run = services.run_start(cluster=cluster, plan=TestPlan.objects.get(slug="power-cooling"), enqueue=False)
    assert not run.results.filter(scope=Scope.NODE).exists()  # no node task will mark it started
    result = claimed_group(run)
    run.refresh_from_db()
    assert run.status == "running" and run.started_at == result.started_at

    services.result_record(result=result, claim="t-group", verdict=Verdict(status="pass", reason=""), measurements=[])
    services.run_finalize(run_id=run.pk, dispatch=False)

    run.refresh_from_db()
    assert run.status == "pass" and run.started_at < run.finished_at


def test_a_run_finalised_without_a_start_takes_its_first_checks_claim_as_its_start(cluster, quick_plan) -> None:
    run = services.run_start(cluster=cluster, plan=quick_plan, enqueue=False)
    claimed_at = timezone.now() - timedelta(seconds=40)
    CheckResult.objects.filter(run=run).update(status="pass", started_at=claimed_at)

    services.run_finalize(run_id=run.pk, dispatch=False)

    run.refresh_from_db()
    assert run.started_at == claimed_at and run.elapsed_s == pytest.approx(40, abs=5)


def test_a_node_a_group_check_judged_is_checked_on_the_cluster_page_as_health_says(
    viewer_client, cluster, make_user
) -> None:
    run = services.run_start(cluster=cluster, plan=TestPlan.objects.get(slug="power-cooling"), enqueue=False)
    result = claimed_group(run)
    attribution = {f"n0{i}": {"status": "pass", "reason": "within spec"} for i in range(1, 5)}
    services.result_record(
        result=result,
        claim="t-group",
        verdict=Verdict(status="pass", reason=""),
        measurements=[],
        attribution=attribution,
    )
    services.run_finalize(run_id=run.pk, dispatch=False)
    health_evaluate_run(run_id=run.pk)

    healthy = set(NodeHealth.objects.filter(state="healthy").values_list("node__hostname", flat=True))
    assert healthy == {"n01", "n02", "n03", "n04"}
    rows = selectors.cluster_nodes_with_last_status(cluster=cluster)
    assert {r["node"].hostname: (r["worst"], [j.kind for j in r["last"]]) for r in rows} == {
        h: ("pass", ["power_soak"]) for h in healthy
    }
    html = viewer_client.get(reverse("inventory:cluster_detail", args=["c1"])).content.decode()
    assert "never checked" not in html and html.count(f'href="/results/{result.pk}/"') == 4


def test_an_unattributed_group_failure_checks_no_node_on_either_page(cluster, quick_plan) -> None:
    # The output could not say which node was slow: neither health nor the cluster page pins it on one.
    run = services.run_start(cluster=cluster, plan=with_group(quick_plan), enqueue=False)
    CheckResult.objects.filter(run=run, scope=Scope.NODE).update(status="pass")
    CheckResult.objects.filter(run=run, scope=Scope.GROUP).update(status="fail", reason="slow somewhere")
    services.run_finalize(run_id=run.pk, dispatch=False)
    health_evaluate_run(run_id=run.pk)

    assert set(NodeHealth.objects.values_list("state", flat=True)) == {"healthy"}
    rows = selectors.cluster_nodes_with_last_status(cluster=cluster)
    assert {r["worst"] for r in rows} == {"pass"}


def group_eta(run: Run, running_for_s: float) -> selectors.RunProgress:
    CheckResult.objects.filter(run=run, scope=Scope.GROUP).update(
        status="running", started_at=timezone.now() - timedelta(seconds=running_for_s)
    )
    return selectors.run_progress(run=run)


def test_the_eta_counts_down_while_a_group_check_runs(cluster, quick_plan) -> None:
    run = services.run_start(cluster=cluster, plan=with_group(quick_plan, "power-soak"), enqueue=False)
    Run.objects.filter(pk=run.pk).update(status="running", started_at=timezone.now() - timedelta(minutes=3))
    run.refresh_from_db()
    CheckResult.objects.filter(run=run, scope=Scope.NODE).update(status="pass", duration_s=2.0)
    item = next(i for i in run.plan_snapshot["items"] if i["kind"] == "power_soak")
    expected = selectors._declared_s(item)
    assert expected is not None and expected > 60  # the soak's duration_s, its start slack, a read

    etas = [group_eta(run, s).eta_s for s in (0, 20, 40, 60)]

    assert etas == pytest.approx([expected, expected - 20, expected - 40, expected - 60], abs=2.0)
    late = group_eta(run, expected + 30)
    assert late.eta_s == 0 and late.eta_text == "ETA: any moment (30 s over the estimate)"
    # Queued, it adds its whole expected time after the node checks.
    CheckResult.objects.filter(run=run, scope=Scope.GROUP).update(status="queued", started_at=None)
    assert selectors.run_progress(run=run).eta_s == pytest.approx(expected)
