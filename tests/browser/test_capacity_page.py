"""The capacity page in Chromium: from the cluster page to the latest heat soak, its three plotly
charts drawn by the app's own plotly.js under the Content-Security-Policy, the floor plan in words,
a hostile rack name shown as text (no script runs), and the picker opening an earlier soak.

The soak results are recorded through the run services (tests/portal/capacity_helpers.py): no
worker or testbed is needed to draw what a soak recorded."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import assert_plotly_rendered, log_in

pytestmark = [pytest.mark.browser, pytest.mark.integration]

HOSTILE = "<script>alert(1)</script>"


def test_it_shows_the_latest_soak_and_opens_an_earlier_one(live_server, page, shot, make_user) -> None:
    from tests.checks.soak_builder import Soak
    from tests.portal.capacity_helpers import record_soak, soak_cluster

    cluster = soak_cluster()
    healthy = record_soak(cluster)
    faulty = record_soak(cluster, Soak(mis_cabled="pdu-r2-a", low_flow=True), rename={"r1": HOSTILE})
    make_user("vic", "viewer")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    log_in(page, live_server.url, "vic")

    page.goto(f"{live_server.url}/clusters/{cluster.name}/")
    page.get_by_role("link", name="Power and cooling capacity").click()
    page.wait_for_url(re.compile(r"/clusters/dc1/capacity/$"))
    drawn = assert_plotly_rendered(page)
    shot("capacity-latest")
    assert drawn["plots"] == 3, drawn
    assert page.locator("#capacity-verdict").inner_text() == "fail"
    assert f"result #{faulty.pk}" in page.locator("#capacity-result").inner_text()
    shapes = page.evaluate("() => document.getElementById('capacity-power').layout.shapes.length")
    assert shapes == 2, "the UPS capacity and capacity / margin lines"
    assert "UPS ups1 capacity 120.0 kW" in drawn["text"]
    assert "limit: 80% of the breaker" in drawn["text"] and "minimum (DLC)" in drawn["text"]

    rack = page.locator("#floor-plan td.rack").first
    assert rack.inner_text().split("\n")[0] == HOSTILE, "the name is text, not markup"
    assert re.search(r"\d+\.\d\d kW of 40\.00 kW \(\d+%\)", page.locator("#floor-plan").inner_text())
    phase = page.locator("#phases tr", has_text="pdu-r2-a").nth(1)
    assert "fail" in phase.inner_text() and "54.1 A" in phase.inner_text()
    assert "fail" in page.locator("#loops tr", has_text="cdu1").inner_text()

    page.select_option("#capacity-picker select[name=result]", str(healthy.pk))
    page.wait_for_url(re.compile(rf"\?result={healthy.pk}$"))
    assert_plotly_rendered(page)
    shot("capacity-earlier")
    assert page.locator("#capacity-verdict").inner_text() == "pass"
    assert dialogs == [], f"a script ran: {dialogs}"
