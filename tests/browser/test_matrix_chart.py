"""A topology result in Chromium: its GPU x NIC heatmap drawn by the app's own plotly.js under the
Content-Security-Policy, the far NICs outlined in red, a hostile NIC name shown as text (no script
runs), and a cell's hover naming its link and why it is out of spec.

The result is judged by the real topology check from a real `nvidia-smi topo -m` capture and recorded
through the run services (tests/portal/matrix_helpers.py): no worker or testbed is needed to draw it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.browser.conftest import assert_plotly_rendered, log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.integration]

# Where plotly drew a cell: the centre of (row, column) of the first heatmap, in page pixels.
CELL_CENTRE_JS = """([row, col]) => {
  const plot = document.querySelector('#result-chart');
  const box = plot.querySelector('.nsewdrag').getBoundingClientRect();
  const xa = plot._fullLayout.xaxis, ya = plot._fullLayout.yaxis;
  return [box.left + xa.c2p(col), box.top + ya.c2p(row)];
}"""


def test_it_draws_the_topology_heatmap_with_the_far_nics_marked(live_server, page, shot, make_user) -> None:
    from portal.inventory.models import Cluster, Node
    from tests.portal.matrix_helpers import HOSTILE, far_nic, matrix_run, record_topology

    cluster = Cluster.objects.create(name="c1", profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"n{i:02d}") for i in range(1, 5))
    result = record_topology(matrix_run(cluster), far_nic().replace("NIC0: mlx5_0", f"NIC0: {HOSTILE}"))
    make_user("vic", "viewer")
    dialogs: list[str] = []
    console: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("console", lambda m: console.append(f"{m.text} at {m.location['url']}") if m.type == "error" else None)
    log_in(page, live_server.url, "vic")

    page.goto(f"{live_server.url}/results/{result.pk}/")
    drawn = assert_plotly_rendered(page, "#result-charts")
    shot("topology-matrix")
    assert [t["type"] for t in drawn["data"][0]] == ["heatmap"], drawn["data"]
    assert page.locator("#result-chart .hm image").count() == 1, "the heatmap is drawn"
    outlines = page.locator("#result-chart .layer-above .shapelayer path")
    assert outlines.count() == 4, "GPU3's four nearest NICs are outlined"
    assert HOSTILE in drawn["text"], "the NIC name is a tick label, as text"
    assert page.locator("#result-charts img").count() == 0, "no element was made from the name"
    assert "Link from each GPU to each NIC" in drawn["text"] and "SYS" in drawn["text"]

    page.locator("#result-chart").scroll_into_view_if_needed()  # the mouse reaches only what is in view
    x, y = page.evaluate(CELL_CENTRE_JS, [3, 3])
    hover = _hover(page, x, y)
    shot("topology-matrix-hover")
    assert "GPU 3" in hover and "mlx5_3" in hover and "NODE" in hover, hover
    assert "out of spec: gpu_nearest_nic_link NODE (<= PXB)" in hover, hover
    assert dialogs == [], f"a script ran: {dialogs}"
    # The app serves no favicon; Chromium asks for one anyway (a 404 on every page, not this chart's).
    errors = [m for m in console if not m.endswith("/favicon.ico")]
    assert errors == [], f"console errors: {errors}"


def test_it_colours_a_host_bandwidth_cell_under_its_floor_red(live_server, page, shot, make_user) -> None:
    """One GPU's host copy 10% under its floor: its cell is drawn red on the screen, its neighbours (just
    over the same floor) blue, and its hover still says the value and the floor."""
    from portal.inventory.models import Cluster, Node
    from tests.portal.matrix_helpers import matrix_run, record_host_bw_one_slow

    cluster = Cluster.objects.create(name="c1", profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"n{i:02d}") for i in range(1, 5))
    result = record_host_bw_one_slow(matrix_run(cluster))
    make_user("vic", "viewer")
    log_in(page, live_server.url, "vic")

    page.goto(f"{live_server.url}/results/{result.pk}/")
    drawn = assert_plotly_rendered(page, "#result-charts")
    assert "vs threshold>= 10 GB/s>= 12.3 GB/s" in drawn["text"], "the floors in the colour bar"
    page.locator("#result-chart").scroll_into_view_if_needed()
    slow, fast, other = (_cell_pixel(page, row, 0) for row in (2, 0, 3))
    shot("host-bandwidth-one-cell-under-its-floor")
    assert _red(slow), f"GPU 2 host to device, 10% under the floor, is drawn {slow}"
    assert _blue(fast) and _blue(other), f"the GPUs just over the floor are drawn {fast} and {other}"

    x, y = page.evaluate(CELL_CENTRE_JS, [2, 0])
    hover = _hover(page, x, y)
    assert "11.07 GB/s" in hover and "threshold: >= 12.3" in hover and "10.0% short of the threshold" in hover


def _cell_pixel(page: Page, row: int, col: int) -> tuple[int, int, int]:
    """The colour drawn a third of the way into the cell (row, col), clear of its centred text and its
    outline, read from a one-pixel screenshot."""
    from io import BytesIO

    from PIL import Image

    x, y = page.evaluate(CELL_CENTRE_JS, [row, col])
    width = page.evaluate("() => document.querySelector('#result-chart')._fullLayout.xaxis._length")
    ncols = page.evaluate("() => document.querySelector('#result-chart').data[0].x.length")
    x -= width / ncols / 3
    sx, sy = page.evaluate("() => [window.scrollX, window.scrollY]")
    png = page.screenshot(full_page=True, clip={"x": x + sx, "y": y + sy, "width": 1, "height": 1})
    r, g, b = Image.open(BytesIO(png)).convert("RGB").getpixel((0, 0))
    return r, g, b


def _red(rgb: tuple[int, int, int]) -> bool:
    r, g, b = rgb
    return r > 140 and r > g + 50 and r > b + 50


def _blue(rgb: tuple[int, int, int]) -> bool:
    r, _, b = rgb
    return b > r + 10


def _hover(page: Page, x: float, y: float, tries: int = 6) -> str:
    """The hover text of the cell at (x, y). plotly answers mouse moves, and a busy machine can draw
    the figure after the first one: move off and back onto the cell until the text shows."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for _ in range(tries):
        page.mouse.move(x - 3, y - 3)
        page.mouse.move(x, y, steps=3)
        try:
            found = page.wait_for_selector("#result-chart .hoverlayer .hovertext", timeout=5_000)
        except PlaywrightTimeout:
            continue
        if found is not None:
            return found.text_content() or ""
    raise AssertionError(f"no hover text at ({x:.0f}, {y:.0f}) after {tries} moves")
