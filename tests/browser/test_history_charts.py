"""A node's history charts in Chromium at 1280 and 1920 px: every chart fits inside its box
and the window (the right column was clipped), a one-run chart's time ticks read to the minute (not
`12:47:36.9885`), and a point's hover names the node, the line and the value with its unit.
Screenshots under test-artifacts/browser/."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.integration]

# Each drawn chart: its box's right edge, the right edge of what plotly drew, and its x tick labels.
CHARTS_JS = """() => ({
  page: document.documentElement.scrollWidth,
  window: window.innerWidth,
  charts: [...document.querySelectorAll('.charts .chart')].map(c => {
    const svg = c.querySelector('.main-svg');
    const legend = c.querySelector('.legend');
    const box = c.getBoundingClientRect();
    const drawn = svg ? svg.getBoundingClientRect() : null;
    const key = legend ? legend.getBoundingClientRect() : null;
    return {
      id: c.id,
      box: box.right,
      drawn: drawn && drawn.right,
      legend: key && key.right,
      // How far the drawing runs below its box, and the legend below the drawing (> 0: cut off).
      below: drawn && drawn.bottom - box.bottom,
      legend_below: key && drawn && key.bottom - drawn.bottom,
      ticks: [...c.querySelectorAll('.xtick text')].map(t => t.textContent),
    };
  }),
})"""
# Real hostnames are long: the multi-node line is "nccl-allreduce-multi (group hgx-h100-r01-n[01-02])".
HOST = "hgx-h100-r01-n0"
SUB_SECOND = re.compile(r"\d:\d\d\.\d|:\d\d:\d\d")  # "36.9885" or any seconds at all


def _one_run_node(live_server_url: str) -> str:
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
    from portal.inventory.models import Cluster, Node
    from portal.runs import services
    from tests.portal.helpers import add_measurement, set_result

    cluster = Cluster.objects.create(name="c1", profile="H100-SXM-8", transport="local")
    for i in (1, 2):
        Node.objects.create(cluster=cluster, hostname=f"{HOST}{i}", rack="R1", position=str(i))
    plan = TestPlan.objects.create(slug="h", name="History")
    for order, slug in enumerate(["nccl-allreduce", "nccl-allreduce-multi", "burn-in", "ecc-health"]):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    run = services.run_start(cluster=cluster, plan=plan, enqueue=False)
    nccl = set_result(run, f"{HOST}1", "nccl-allreduce", "pass")
    add_measurement(nccl, "busbw_peak", value=470.0, unit="GB/s", threshold=">= 460", ok=True)
    multi = run.results.get(item_key="nccl-allreduce-multi")
    multi.status = "pass"
    multi.save()
    add_measurement(multi, "busbw_peak", value=374.0, unit="GB/s", threshold=">= 300", ok=True)
    burn = set_result(run, f"{HOST}1", "burn-in", "pass")
    for gpu in range(8):
        add_measurement(burn, "gflops", value=109_400.0 - gpu, unit="Gflop/s", gpu=gpu, ok=True)
        add_measurement(burn, "temp_max", value=70.0 + gpu, unit="C", gpu=gpu, ok=True)
    ecc = set_result(run, f"{HOST}1", "ecc-health", "pass")
    add_measurement(ecc, "ecc_volatile_uncorrected", value=0, gpu=0, ok=True)
    return f"{live_server_url}/clusters/c1/nodes/{HOST}1/"


@pytest.mark.parametrize(("first", "width"), [(1280, 1280), (1920, 1920), (1920, 1280), (1280, 1600)])
def test_history_charts_fit_their_boxes_with_minute_ticks(live_server, page, shot, make_user, first, width) -> None:
    """Drawn at `first` px, seen at `width` px: a window made narrower or wider redraws every chart
    inside its box (a grid cell keeps the width of what it holds unless it may shrink)."""
    from django.urls import reverse

    url = _one_run_node(live_server.url)
    assert url.endswith(reverse("history:node_detail", args=["c1", f"{HOST}1"]))
    make_user("vic", "viewer")
    log_in(page, live_server.url, "vic")
    page.set_viewport_size({"width": first, "height": 900})

    page.goto(url)
    page.wait_for_function("document.querySelectorAll('.charts .chart .main-svg').length >= 4")
    if width != first:
        page.set_viewport_size({"width": width, "height": 900})
    page.wait_for_timeout(500)  # plotly's responsive resize settles
    shot(f"node-history-{first}-to-{width}")

    seen = page.evaluate(CHARTS_JS)
    assert seen["page"] <= seen["window"], f"the page is wider than the window: {seen}"
    for chart in seen["charts"]:
        assert chart["drawn"] is not None, chart
        # Inside the box's 1 px border: plotly sizes itself to the box, border included, unless told.
        assert chart["drawn"] <= chart["box"] - 1, f"{chart['id']} is drawn past its box: {chart}"
        assert chart["legend"] is None or chart["legend"] <= chart["drawn"], f"{chart['id']}'s legend is cut: {chart}"
        assert chart["below"] <= 0, f"{chart['id']} runs below its box: {chart}"
        assert chart["legend_below"] is None or chart["legend_below"] <= 0, f"{chart['id']}'s legend is cut: {chart}"
        assert chart["box"] <= seen["window"], f"{chart['id']} runs off the window: {chart}"
        assert chart["ticks"], chart
        noisy = [t for t in chart["ticks"] if SUB_SECOND.search(t)]
        assert not noisy, f"{chart['id']} ticks show seconds: {chart['ticks']}"


def test_a_history_point_hovers_its_node_line_and_value(live_server, page, shot, make_user) -> None:
    url = _one_run_node(live_server.url)
    make_user("vic", "viewer")
    log_in(page, live_server.url, "vic")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(url)
    page.wait_for_selector("#trend-busbw .main-svg")

    chart = page.locator("#trend-busbw")
    chart.scroll_into_view_if_needed()
    text = ""
    for _ in range(6):  # plotly answers mouse moves once drawn; a busy machine draws late
        point = chart.locator(".scatterlayer .trace:first-child .point").first.bounding_box()
        assert point is not None
        x, y = point["x"] + point["width"] / 2, point["y"] + point["height"] / 2
        page.mouse.move(x - 5, y - 5)
        page.mouse.move(x, y, steps=3)
        hover = chart.locator(".hoverlayer .hovertext")
        if hover.count():
            text = hover.first.text_content() or ""
            break
        page.wait_for_timeout(300)
    shot("node-history-hover")
    assert f"{HOST}1" in text and "nccl-allreduce" in text and "470 GB/s" in text, text
    # The multi-node value is drawn against its own floor: two floors, one named after its line.
    labels = page.locator("#trend-busbw .annotation-text").all_text_contents()
    assert any("300" in t and "multi" in t for t in labels) and any("460" in t for t in labels), labels
