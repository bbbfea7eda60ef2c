"""Plan pickers show each plan's duration, the cluster's acceptance plan first and preselected
unless it takes over an hour: from the checks' declared durations and the cluster's overhead, and
from past runs once there are some."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from checks.core.base import REGISTRY, Check
from portal.catalog.models import TestPlan
from portal.catalog.services import fast_plan_ensure
from portal.demo.cluster import DEMO_CHECK_OVERHEAD_S, DEMO_NODES, plan_with_soak
from portal.inventory.models import Cluster, Node
from portal.runs import estimates
from portal.runs.models import Run, Status

# What the demo's plans took on the demo cluster (8 simulated nodes), from the run's start to its
# end: `kiln run demo PLAN --inline --wait` after `kiln demo` (PostgreSQL, a busy 2-core machine) and
# through `make up`'s worker: the quick sweep 10.7, 12.9, 13.7 and 20 s; the demo acceptance 152.6,
# 161.8 and 163 s.
DEMO_QUICK_S = (10.7, 20.0)
DEMO_ACCEPTANCE_S = (152.6, 163.0)


def expected(kind: str, **params: object) -> float:
    check_class = REGISTRY[kind]
    return check_class().expected_s(check_class.make_params(params))


def declared(kind: str, **params: object) -> float:
    check_class = REGISTRY[kind]
    return check_class().declared_s(check_class.make_params(params))


def test_a_check_says_how_long_it_takes_for_its_params() -> None:
    assert expected("burn_in", duration_s=43200) == 43200 + 60
    assert expected("dlc_temperature", idle_s=5, load_s=0) == 5 + Check.SHORT_CHECK_S
    assert expected("dlc_temperature", idle_s=10, load_s=120) == 130 + Check.SHORT_CHECK_S
    assert expected("dcgm_diag", level=3) == 1800
    assert expected("fs_throughput", runtime_s=60) == 120 + Check.SHORT_CHECK_S
    assert expected("gpu_inventory") == Check.SHORT_CHECK_S  # a short read: the default


def test_it_separates_what_the_params_declare_from_the_overhead() -> None:
    assert declared("burn_in", duration_s=3) == 3
    assert declared("dlc_temperature", idle_s=2, load_s=5) == 7
    assert declared("power_soak", duration_s=90) == 90 + 5  # and the common start's slack
    assert declared("rdma_bw", start_slack_s=10) == 10  # the common start's wait
    assert declared("gpu_inventory") == 0


def test_a_plans_estimate_adds_its_items_up() -> None:
    items = [
        {"kind": "gpu_inventory", "params": {}},
        {"kind": "burn_in", "params": {"duration_s": 600}},
        {"kind": "dlc_temperature", "params": {"idle_s": 5, "load_s": 0}},
    ]
    assert estimates.items_estimate_s(items) == 20 + 660 + 25
    assert estimates.items_estimate_s(items, overhead_s=1) == 1 + 601 + 6


def test_it_runs_nodes_in_parallel_as_many_as_a_worker_takes_and_group_checks_once() -> None:
    items = [
        {"kind": "burn_in", "params": {"duration_s": 100}, "scope": "node"},
        {"kind": "nccl_allreduce_multi", "params": {}, "scope": "group"},
    ]
    one_node = estimates.items_estimate_s(items, overhead_s=0, concurrency=64)
    assert one_node == 100
    assert estimates.items_estimate_s(items, nodes=64, overhead_s=0, concurrency=64) == 100
    assert estimates.items_estimate_s(items, nodes=65, overhead_s=0, concurrency=64) == 200
    assert estimates.items_estimate_s(items, nodes=8, overhead_s=2, concurrency=64) == 102 + 2


@pytest.mark.parametrize(
    ("seconds", "exact", "rough"),
    [(45, "45 s", "45 s"), (100, "1 min 40 s", "2 min"), (5400, "1 h 30 min", "1.5 h"), (43260, "12 h 1 min", "12 h")],
)
def test_durations_read_as_people_say_them(seconds: float, exact: str, rough: str) -> None:
    assert estimates.duration_text(seconds) == exact
    assert estimates.duration_text(seconds, rough=True) == rough


@pytest.mark.django_db
def test_the_quick_plan_comes_first_and_acceptance_says_it_takes_over_an_hour(cluster) -> None:
    found = estimates.plan_estimates(cluster=cluster)
    assert [e.plan.slug for e in found][0] == "quick"
    by_slug = {e.plan.slug: e for e in found}
    assert by_slug["acceptance"].from_params_s is not None and by_slug["acceptance"].from_params_s > 12 * 3600
    assert by_slug["acceptance"].label == "Acceptance — about 12 h — longer than an hour"
    assert [e.plan.slug for e in found][-1] == "acceptance"  # the longest last
    assert by_slug["quick"].past_median_s is None and "last" not in by_slug["quick"].label
    assert estimates.default_plan(found) == by_slug["quick"].plan


@pytest.mark.django_db
def test_a_long_acceptance_plan_is_listed_first_and_marked_but_never_preselected(cluster) -> None:
    cluster.acceptance_plan = TestPlan.objects.get(slug="acceptance")
    cluster.save()
    found = estimates.plan_estimates(cluster=cluster)
    assert found[0].plan.slug == "acceptance"
    assert found[0].label == "Acceptance — about 12 h — longer than an hour (recommended)"
    assert estimates.default_plan(found) == TestPlan.objects.get(slug="quick")


def _finished(run: Run, seconds: float, status: str = Status.PASS, hours_ago: float = 1) -> None:
    start = timezone.now() - timedelta(hours=hours_ago)
    end = start + timedelta(seconds=seconds)
    Run.objects.filter(pk=run.pk).update(status=status, started_at=start, finished_at=end)


@pytest.mark.django_db
def test_past_runs_on_this_cluster_give_the_median_duration_and_the_last_one(cluster, make_run) -> None:
    quick = TestPlan.objects.get(slug="quick")
    for hours_ago, seconds in ((3, 90), (2, 400), (1, 100)):
        _finished(make_run(cluster, plan=quick), seconds, hours_ago=hours_ago)
    _finished(make_run(cluster, plan=quick), 5, status=Status.CANCELLED)  # a cancelled run says nothing
    make_run(cluster, plan=quick)  # still queued
    found = {e.plan.slug: e for e in estimates.plan_estimates(cluster=cluster)}
    assert found["quick"].past_runs == 3 and found["quick"].past_median_s == 100
    assert found["quick"].expected_s == 100
    assert found["quick"].label == "Quick sweep — about 2 min (last run: 1 min 40 s)"
    assert found["acceptance"].past_runs == 0


@pytest.mark.django_db
def test_only_the_last_runs_count(cluster, make_run) -> None:
    quick = TestPlan.objects.get(slug="quick")
    for hours_ago, seconds in enumerate((60, 60, 60, 60, 60, 1000, 1000, 1000)):  # newest first
        _finished(make_run(cluster, plan=quick), seconds, hours_ago=hours_ago + 1)
    durations = estimates.past_durations(cluster=cluster, plan_ids=[quick.pk])[quick.pk]
    assert len(durations) == estimates.PAST_RUNS
    assert set(durations) == {60}


@pytest.fixture
def demo_like(db) -> Cluster:
    """The demo cluster as kiln_demo seeds it (its plans, acceptance plan and overhead), without
    its simulator: eight nodes."""
    cluster = Cluster.objects.create(name="sim", profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=h) for h in DEMO_NODES)
    acceptance = fast_plan_ensure(slug="demo-acceptance", name="Acceptance (demo speed)")
    plan_with_soak(acceptance)
    fast_plan_ensure(slug="demo-power-cooling", name="Power and cooling (demo speed)", source="power-cooling")
    Cluster.objects.filter(pk=cluster.pk).update(acceptance_plan=acceptance, check_overhead_s=DEMO_CHECK_OVERHEAD_S)
    cluster.refresh_from_db()
    return cluster


def _within(estimate: float | None, measured: tuple[float, float], factor: float = 1.5) -> bool:
    return estimate is not None and all(m / factor <= estimate <= m * factor for m in measured)


@pytest.mark.django_db
def test_the_demo_estimates_are_within_half_again_of_what_its_plans_took(demo_like) -> None:
    found = {e.plan.slug: e for e in estimates.plan_estimates(cluster=demo_like)}
    assert _within(found["quick"].expected_s, DEMO_QUICK_S), found["quick"].expected_s
    assert _within(found["demo-acceptance"].expected_s, DEMO_ACCEPTANCE_S), found["demo-acceptance"].expected_s


@pytest.mark.django_db
def test_the_demo_lists_and_preselects_its_own_acceptance_first(demo_like, client, make_user) -> None:
    client.force_login(make_user("op", "operator"))
    page = client.get(reverse("runs:run_start", args=[demo_like.name])).content.decode()
    options = page[page.index('<select name="plan"') :]
    options = options[: options.index("</select>")]
    first = options.index("<option")
    assert options.index('value="demo-acceptance" selected') == first + len("<option ")
    assert "Acceptance (demo speed) — about 2 min (recommended)" in options
    assert options.index("Quick sweep — about") < options.index("Acceptance — about 12 h — longer than an hour")


@pytest.mark.django_db
def test_the_campaign_form_defaults_to_the_clusters_acceptance_plan(demo_like, cluster, client, make_user) -> None:
    client.force_login(make_user("op", "operator"))
    page = client.get(reverse("certificates:campaign_list") + "?cluster=sim").content.decode()
    assert 'value="sim" selected' in page
    assert 'value="demo-acceptance" selected' in page
    page = client.get(reverse("certificates:campaign_list") + "?cluster=c1").content.decode()
    assert 'value="demo-acceptance" selected' not in page  # c1 declares no acceptance plan


@pytest.mark.django_db
def test_history_replaces_the_declared_estimate(demo_like, make_run) -> None:
    acceptance = TestPlan.objects.get(slug="demo-acceptance")
    _finished(make_run(demo_like, plan=acceptance), 4000)  # the simulator on a machine far busier
    found = {e.plan.slug: e for e in estimates.plan_estimates(cluster=demo_like)}
    assert found["demo-acceptance"].expected_s == 4000
    assert found["demo-acceptance"].label.endswith("— longer than an hour (last run: 1 h 6 min) (recommended)")
    assert estimates.default_plan(list(found.values())) == TestPlan.objects.get(slug="quick")


@pytest.mark.django_db
def test_the_campaign_and_schedule_forms_list_plans_with_durations(client, cluster, make_user) -> None:
    client.force_login(make_user("op", "operator"))
    for url in (reverse("certificates:campaign_list"), reverse("health:schedule_create")):
        page = client.get(url).content.decode()
        assert page.index("Quick sweep — about 2 min") < page.index("Acceptance — about 12 h"), url
    page = client.get(reverse("health:schedule_create")).content.decode()
    assert 'value="quick" selected' in page  # a nightly sweep, whichever plan is listed first


@pytest.mark.django_db
def test_kiln_cluster_update_sets_and_clears_the_acceptance_plan_and_overhead(cluster, capsys) -> None:
    call_command("kiln_cluster", "update", "c1", "--acceptance-plan", "acceptance", "--check-overhead", "2.5")
    cluster.refresh_from_db()
    assert cluster.acceptance_plan is not None and cluster.acceptance_plan.slug == "acceptance"
    assert cluster.check_overhead_s == 2.5
    assert "acceptance_plan 'acceptance'" in capsys.readouterr().out
    for bad, why in (("--acceptance-plan", "no plan 'nope'"), ("--check-overhead", "a number of seconds")):
        with pytest.raises(CommandError, match=why):
            call_command("kiln_cluster", "update", "c1", bad, "nope")
    for bad in ("nan", "-1", "1e9"):
        with pytest.raises(CommandError, match="check_overhead_s"):
            call_command("kiln_cluster", "update", "c1", "--check-overhead", bad)
    call_command("kiln_cluster", "update", "c1", "--acceptance-plan", "", "--check-overhead", "")
    cluster.refresh_from_db()
    assert cluster.acceptance_plan is None and cluster.check_overhead_s is None
