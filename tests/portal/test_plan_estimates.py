"""Plan pickers show each plan's duration, quick plan first (issue 16: "Acceptance" came first with no
duration, and on the demo it is a 12-hour burn-in): from the checks' params, and from past runs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from checks.base import REGISTRY, Check
from portal.catalog.models import TestPlan
from portal.runs import estimates
from portal.runs.models import Run, Status


def expected(kind: str, **params: object) -> float:
    check_class = REGISTRY[kind]
    return check_class().expected_s(check_class.make_params(params))


def test_a_check_says_how_long_it_takes_for_its_params() -> None:
    assert expected("burn_in", duration_s=43200) == 43200 + 60
    assert expected("dlc_temperature", idle_s=5, load_s=0) == 5 + Check.SHORT_CHECK_S
    assert expected("dlc_temperature", idle_s=10, load_s=120) == 130 + Check.SHORT_CHECK_S
    assert expected("dcgm_diag", level=3) == 1800
    assert expected("fs_throughput", runtime_s=60) == 120 + Check.SHORT_CHECK_S
    assert expected("gpu_inventory") == Check.SHORT_CHECK_S  # a short read: the default


def test_a_plans_estimate_adds_its_items_up() -> None:
    items = [
        {"kind": "gpu_inventory", "params": {}},
        {"kind": "burn_in", "params": {"duration_s": 600}},
        {"kind": "dlc_temperature", "params": {"idle_s": 5, "load_s": 0}},
    ]
    assert estimates.items_estimate_s(items) == 20 + 660 + 25


@pytest.mark.parametrize(
    ("seconds", "exact", "rough"),
    [(45, "45 s", "45 s"), (100, "1 min 40 s", "2 min"), (5400, "1 h 30 min", "1.5 h"), (43260, "12 h 1 min", "12 h")],
)
def test_durations_read_as_people_say_them(seconds: float, exact: str, rough: str) -> None:
    assert estimates.duration_text(seconds) == exact
    assert estimates.duration_text(seconds, rough=True) == rough


@pytest.mark.django_db
def test_the_quick_plan_comes_first_and_acceptance_says_it_takes_12_hours(cluster) -> None:
    found = estimates.plan_estimates(cluster=cluster)
    assert [e.plan.slug for e in found][0] == "quick"
    by_slug = {e.plan.slug: e for e in found}
    assert by_slug["acceptance"].from_params_s is not None and by_slug["acceptance"].from_params_s > 12 * 3600
    assert by_slug["acceptance"].label.startswith("Acceptance — about 12 h")
    assert by_slug["quick"].past_median_s is None and "last" not in by_slug["quick"].label


def _finished(run: Run, seconds: float, status: str = Status.PASS, hours_ago: float = 1) -> None:
    start = timezone.now() - timedelta(hours=hours_ago)
    end = start + timedelta(seconds=seconds)
    Run.objects.filter(pk=run.pk).update(status=status, started_at=start, finished_at=end)


@pytest.mark.django_db
def test_past_runs_on_this_cluster_give_the_median_duration(cluster, make_run) -> None:
    quick = TestPlan.objects.get(slug="quick")
    for seconds in (90, 100, 400):
        _finished(make_run(cluster, plan=quick), seconds)
    _finished(make_run(cluster, plan=quick), 5, status=Status.CANCELLED)  # a cancelled run says nothing
    make_run(cluster, plan=quick)  # still queued
    found = {e.plan.slug: e for e in estimates.plan_estimates(cluster=cluster)}
    assert found["quick"].past_runs == 3 and found["quick"].past_median_s == 100
    assert found["quick"].label == "Quick sweep — about 2 min (last 3 runs: 1 min 40 s)"
    assert found["acceptance"].past_runs == 0


@pytest.mark.django_db
def test_only_the_last_runs_count(cluster, make_run) -> None:
    quick = TestPlan.objects.get(slug="quick")
    for hours_ago, seconds in enumerate((60, 60, 60, 60, 60, 1000, 1000, 1000)):  # newest first
        _finished(make_run(cluster, plan=quick), seconds, hours_ago=hours_ago + 1)
    durations = estimates.past_durations(cluster=cluster, plan_ids=[quick.pk])[quick.pk]
    assert len(durations) == estimates.PAST_RUNS
    assert set(durations) == {60}


@pytest.mark.django_db
def test_the_run_start_page_lists_plans_with_durations_quick_first(client, cluster, make_user) -> None:
    client.force_login(make_user("op", "operator"))
    page = client.get(reverse("runs:run_start", args=[cluster.name])).content.decode()
    options = page[page.index('<select name="plan"') :]
    options = options[: options.index("</select>")]
    assert options.index("Quick sweep — about 2 min") < options.index("Acceptance — about 12 h")
    assert 'value="quick" selected' in options


@pytest.mark.django_db
def test_the_campaign_and_schedule_forms_list_plans_with_durations(client, cluster, make_user) -> None:
    client.force_login(make_user("op", "operator"))
    for url in (reverse("certificates:campaign_list"), reverse("health:schedule_create")):
        page = client.get(url).content.decode()
        assert page.index("Quick sweep — about 2 min") < page.index("Acceptance — about 12 h"), url
