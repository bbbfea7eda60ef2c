"""A result page with wide per-GPU tables in Chromium at 1280 and 1920 px: nothing runs off
the right edge of the page; a table wider than the page scrolls inside its own box. Screenshots under
test-artifacts/browser/."""

from __future__ import annotations

import pytest

from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.integration]

# The page's own width against the window's, and each table box's right edge.
WIDTHS_JS = """() => ({
  page: document.documentElement.scrollWidth,
  window: window.innerWidth,
  boxes: [...document.querySelectorAll('.table-wrap')].map(b => Math.ceil(b.getBoundingClientRect().right)),
  scrolls: [...document.querySelectorAll('.table-wrap')].map(b => b.scrollWidth > b.clientWidth),
})"""


@pytest.mark.parametrize("width", [1280, 1920])
def test_wide_result_tables_stay_inside_the_page(live_server, page, shot, make_user, width) -> None:
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
    from portal.inventory.models import Cluster, Node
    from portal.runs import services
    from tests.portal.helpers import add_measurement, set_result

    cluster = Cluster.objects.create(name="c1", profile="H100-SXM-8", transport="local")
    Node.objects.create(cluster=cluster, hostname="n01")
    plan = TestPlan.objects.create(slug="w", name="Width")
    TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug="ecc-health"), order=0)
    run = services.run_start(cluster=cluster, plan=plan, enqueue=False)
    result = set_result(run, "n01", "ecc-health", "fail", "GPU 5: 3 uncorrectable ECC errors")
    for gpu in range(8):
        for i in range(24):
            add_measurement(result, f"clocks_throttle_reason_counter_{i}", value=123456.5, unit="us", gpu=gpu)
        add_measurement(result, "ecc_volatile_uncorrected", value=3 if gpu == 5 else 0, unit="errors", gpu=gpu)
    add_measurement(result, "kernel_log", text="/var/log/" + "x" * 300 + ".log")
    make_user("vic", "viewer")
    log_in(page, live_server.url, "vic")
    page.set_viewport_size({"width": width, "height": 900})

    page.goto(f"{live_server.url}/results/{result.pk}/")
    page.wait_for_selector("#ecc-counts")  # the ECC table, loaded after the page
    shot(f"result-wide-tables-{width}")

    seen = page.evaluate(WIDTHS_JS)
    assert seen["page"] <= seen["window"], f"the page is wider than the window: {seen}"
    assert seen["boxes"] and max(seen["boxes"]) <= seen["window"], seen
    assert any(seen["scrolls"]), f"the 25-column table scrolls inside its box: {seen}"
