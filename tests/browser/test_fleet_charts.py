"""A run's NCCL, fleet distribution and rack charts in Chromium at 1280 px: the NCCL floor is
drawn from the size the check judged (1 GiB), not across the small sizes; the distribution says its
equal values in words and shows every point; the rack heatmap of a constant temperature is one
colour, says so, and shows each node's value in its cell; the picker offers judged metrics under
their check. Screenshots under test-artifacts/browser/."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.browser.conftest import assert_plotly_rendered, log_in

if TYPE_CHECKING:
    from portal.runs.models import Run

pytestmark = [pytest.mark.browser, pytest.mark.integration]

GiB = 2**30
SWEEP = [float(2**e) for e in range(3, 34)]  # 8 B .. 8 GiB
HOSTS = ["n01", "n02", "n03", "n04"]

# Where the floor's dashed line starts, and where plotly puts 1 GiB and 8 B on the x axis (page px).
FLOOR_JS = """() => {
  const gd = document.querySelector('#run-chart');
  const xa = gd._fullLayout.xaxis;
  const line = gd.querySelector('.shapelayer path').getBoundingClientRect();
  const label = gd.querySelector('.annotation').getBoundingClientRect();
  const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
  return {start: line.left, end: line.right, label: label.left, gib: box.left + xa.l2p(Math.log10(2 ** 30)),
          smallest: box.left + xa.l2p(Math.log10(8)), right: box.right};
}"""


def _seeded() -> Run:
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
    from portal.inventory.models import Cluster, Node
    from portal.runs import services
    from portal.runs.models import Series
    from tests.portal.helpers import add_measurement, set_result

    cluster = Cluster.objects.create(name="c1", profile="H100-SXM-8", transport="local")
    for i, host in enumerate(HOSTS):
        Node.objects.create(cluster=cluster, hostname=host, rack=f"R{i // 2 + 1}", position=str(i % 2 + 1))
    plan = TestPlan.objects.create(slug="f", name="Fleet")
    for order, slug in enumerate(["nccl-allreduce", "burn-in"]):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    run = services.run_start(cluster=cluster, plan=plan, enqueue=False)
    for host in HOSTS:
        nccl = set_result(run, host, "nccl-allreduce", "pass")
        busbw = [min(480.0, x / 1.5e7) for x in SWEEP]  # small sizes far below the floor, as on any HGX
        Series.objects.create(result=nccl, name="busbw", unit="GB/s", x_unit="B", x=SWEEP, y=busbw)
        labels = {"peak_min_bytes": str(GiB), "size": str(8 * GiB)}
        add_measurement(nccl, "busbw_peak", value=480.0, unit="GB/s", threshold=">= 460", ok=True, labels=labels)
        add_measurement(nccl, "ranks", value=8.0)  # evidence bookkeeping: never offered
        burn = set_result(run, host, "burn-in", "pass")
        for gpu in range(8):
            add_measurement(burn, "temp_max", value=40.0, unit="C", gpu=gpu, threshold="<= 87", ok=True)
    return run


def test_the_run_charts_read_at_1280_px(live_server, page, shot, make_user) -> None:
    run = _seeded()
    make_user("vic", "viewer")
    log_in(page, live_server.url, "vic")
    page.set_viewport_size({"width": 1280, "height": 900})
    base = f"{live_server.url}/runs/{run.pk}/charts"

    page.goto(f"{base}/nccl/?check=nccl-allreduce")
    drawn = assert_plotly_rendered(page)
    shot("nccl-floor-from-1-gib")
    floor = page.evaluate(FLOOR_JS)
    assert abs(floor["start"] - floor["gib"]) <= 3, f"the floor starts at 1 GiB: {floor}"
    assert floor["start"] - floor["smallest"] > 300, f"no floor over the small sizes: {floor}"
    assert floor["end"] <= floor["right"] + 1, floor
    assert abs(floor["label"] - floor["gib"]) <= 6, f"its label sits at its start: {floor}"
    assert "floor 460 GB/s (judged from 1 GiB)" in drawn["text"]

    page.goto(f"{base}/distribution/?pick=burn-in|temp_max|")
    drawn = assert_plotly_rendered(page)
    shot("distribution-equal-values")
    assert "all 4 values are equal: 40 °C" in drawn["text"]
    assert page.locator("#run-chart .scatterlayer .point").count() == 4, "every node's point is drawn"
    groups = page.locator("#metric-picker optgroup").evaluate_all("gs => gs.map(g => g.label)")
    assert groups == ["NCCL all-reduce (node) · nccl-allreduce", "Burn-in · burn-in"], groups
    options = page.locator("#metric-picker option").all_text_contents()
    assert not [o for o in options if "ranks" in o], options

    page.goto(f"{base}/rack/?metric=burn-in:temp_max")
    drawn = assert_plotly_rendered(page)
    shot("rack-constant-temperature")
    assert "all 4 nodes: 40 °C" in drawn["text"]
    assert drawn["text"].count("40 °C") >= 5, "each cell shows its value, and the title says it once"
    assert page.locator("#run-chart .colorbar").count() == 0, "no colour scale invented for one value"
    seen = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert seen[0] <= seen[1], seen
