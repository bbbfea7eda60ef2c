"""Start a run from the cluster page and watch its grid fill in live, without a page reload.

The run is executed by a real Celery worker process over SSH on the sshd testbed; the page is
updated by htmx polling every 2 s.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import COUNT_SWAPS_JS, GRID_CELLS_JS, PROGRESS_SEEN_JS, log_in, start_run_from_cluster_page

pytestmark = [pytest.mark.browser, pytest.mark.integration]

# The element that polls: the grid itself, or its summary (which swaps only the changed rows).
POLLING = "#run-grid[hx-trigger], #run-grid [hx-trigger]"
FINAL = {"pass", "warn", "fail", "error", "skipped", "cancelled"}


def test_it_fills_the_grid_live_until_the_run_fails(
    testbed_cluster, clean_testbed, celery_worker_process, live_server, page, shot, make_user
) -> None:
    make_user("olga", "operator")
    for node in clean_testbed.nodes:
        clean_testbed.set_faults(node.hostname, delay_ms=1200)  # slow, so the run lasts a few polls
    clean_testbed.set_faults("gpu03", delay_ms=1200, ecc_uncorrectable_gpu=2)

    log_in(page, live_server.url, "olga", shot)
    start_run_from_cluster_page(page, live_server.url, "tb", "itest", shot)
    page.evaluate(COUNT_SWAPS_JS)
    before = page.evaluate(GRID_CELLS_JS)
    shot("grid-started")
    assert set(before) == {f"gpu{i:02d}" for i in range(1, 9)}
    statuses_before = {s for cells in before.values() for s in cells}
    assert statuses_before & {"queued", "waiting", "running"}, f"the run was over before its page showed: {before}"
    assert page.locator(POLLING).count() == 1, "an active run's grid polls"

    page.wait_for_function(PROGRESS_SEEN_JS, timeout=30_000)
    shot("grid-live")
    page.wait_for_selector('#run-grid[data-status="fail"]', timeout=60_000, state="attached")
    shot("grid-final")

    assert page.evaluate("window.__kilnMarker") == 1, "the page was reloaded or navigated away"
    assert page.evaluate("window.__kilnSwaps") >= 1, "htmx swapped the grid in place"
    after = page.evaluate(GRID_CELLS_JS)
    assert set(after) == set(before)
    assert all(len(cells) == 2 and set(cells) <= FINAL for cells in after.values()), after
    assert after["gpu03"] == ["pass", "fail"], after["gpu03"]
    assert all(cells == ["pass", "pass"] for host, cells in after.items() if host != "gpu03"), after
    assert page.locator(POLLING).count() == 0, "a finished run's grid stops polling"

    # The failing cell says why, naming the GPU; its result page shows the evidence.
    failing = page.locator("#run-grid a.cell.fail")
    assert failing.count() == 1
    assert "GPU 2" in failing.get_attribute("title")
    row = page.locator("#run-grid tr", has=page.locator("a.cell.fail"))
    assert "GPU 2: 2 uncorrectable volatile ECC errors" in row.inner_text()
    failing.click()
    page.wait_for_url("**/results/*/")
    shot("failing-result")
    assert "gpu03" in page.locator("main").inner_text()
    page.wait_for_selector("#ecc-counts")  # the ECC and Xid table, loaded after the page
    assert "volatile uncorr." in page.locator("#ecc-counts").inner_text()
    assert "ecc_volatile_uncorrected" not in page.locator("main").inner_text(), "the counters are shown once"
