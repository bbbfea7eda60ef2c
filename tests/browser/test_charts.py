"""Open a result of a run started from the browser and check its plotly chart rendered.

The plan holds the built-in NCCL all-reduce and burn-in checks at simulator speed (each check's simulator_params) and
runs on two nodes of the sshd testbed, executed by a real Celery worker process.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import assert_plotly_rendered, log_in, start_run_from_cluster_page, wait_for_run_end

pytestmark = [pytest.mark.browser, pytest.mark.integration]


@pytest.fixture
def charts_plan(testbed_cluster):
    from checks.core.base import simulator_params
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

    plan = TestPlan.objects.create(slug="charts", name="Charts plan")
    for order, slug in enumerate(["nccl-allreduce", "burn-in"]):
        TestPlanItem.objects.create(
            plan=plan,
            check_definition=CheckDefinition.objects.get(slug=slug),
            order=order,
            param_overrides=simulator_params(slug),
        )
    return plan


def test_it_renders_the_nccl_and_burn_in_charts_of_a_result(
    charts_plan, celery_worker_process, live_server, page, shot, make_user
) -> None:
    make_user("chloe", "operator")
    log_in(page, live_server.url, "chloe")
    start_run_from_cluster_page(page, live_server.url, "tb", "charts", shot, nodes="gpu[01-02]")
    assert wait_for_run_end(page, timeout_s=60) == "pass"
    shot("run-passed")

    page.locator("#run-grid tr", has_text="gpu01").locator("a.cell").nth(0).click()
    page.wait_for_url("**/results/*/")
    nccl = assert_plotly_rendered(page)
    shot("nccl-result-chart")
    assert page.locator("h1").inner_text() == "nccl-allreduce on gpu01"
    assert "log" in nccl["xtype"], "busbw against a log-scaled message size"
    assert "floor 460 GB/s" in nccl["text"], "the threshold is drawn"
    page.go_back()

    page.locator("#run-grid tr", has_text="gpu01").locator("a.cell").nth(1).click()
    page.wait_for_url("**/results/*/")
    burn = assert_plotly_rendered(page)
    shot("burn-in-result-chart")
    traces = [t for plot in burn["data"] for t in plot]
    assert len([t for t in traces if t["n"] > 1]) >= 8, f"a line per GPU over time: {traces}"
    assert "slowdown 87 C" in burn["text"], "the slowdown threshold is drawn"
