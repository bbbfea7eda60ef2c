"""The triage view in Chromium at 1280 and 1920 px: its table wraps long reasons and never runs off
the right edge, its links lead to the node page and the result, and it saves a screenshot per width.

The results are recorded directly (tests/portal/helpers.py): no worker or testbed is needed to show
what a run recorded."""

from __future__ import annotations

import re

import pytest

from portal.inventory.models import Cluster, Node
from portal.runs import services
from tests.browser.conftest import log_in
from tests.portal.helpers import add_measurement, set_result

pytestmark = [pytest.mark.browser, pytest.mark.integration]

LONG = "node power: readings at 39 of 45 time points (need 41); " * 6


def _seed() -> int:
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

    cluster = Cluster.objects.create(name="tri", profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"gpu{i:03d}", serial=f"SN{i}") for i in range(1, 21))
    plan = TestPlan.objects.create(slug="tri", name="Triage plan")
    for order, slug in enumerate(["gpu-inventory", "ecc-health"]):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    run = services.run_start(cluster=cluster, plan=plan, enqueue=False)
    for i in (3, 17):
        host = f"gpu{i:03d}"
        inventory = set_result(run, host, "gpu-inventory", "pass")
        add_measurement(inventory, "gpu_serial", text="1654922058105" * 3, gpu=5)
        add_measurement(inventory, "gpu_pci_bus_id", text="00000000:AB:00.0", gpu=5)
        ecc = set_result(run, host, "ecc-health", "fail", f"GPU 5: {i} uncorrectable volatile ECC errors (max 0)")
        add_measurement(ecc, "ecc_volatile_uncorrected", value=float(i), gpu=5, threshold="<= 0", ok=False)
    for i in range(4, 12):
        set_result(run, f"gpu{i:03d}", "ecc-health", "error", LONG + "x" * 120)
    return run.pk


@pytest.mark.parametrize("width", [1280, 1920])
def test_it_fits_the_triage_table_in_the_window(live_server, page, shot, make_user, width) -> None:
    run_id = _seed()
    make_user("vic", "viewer")
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, live_server.url, "vic")
    page.goto(f"{live_server.url}/runs/{run_id}/")
    triage = page.locator("#triage")
    triage.scroll_into_view_if_needed()
    shot(f"triage-{width}")
    assert page.locator("#triage tr.triage-line").count() == 2
    fits = page.evaluate(
        """() => {
            const t = document.querySelector('#triage table');
            return {right: t.getBoundingClientRect().right, view: document.documentElement.clientWidth,
                    scroll: t.scrollWidth, client: t.clientWidth};
        }"""
    )
    assert fits["right"] <= fits["view"] and fits["scroll"] <= fits["client"], fits
    assert "gpu[003,017]" in triage.inner_text() and "RMA" in triage.inner_text()
    triage.get_by_role("link", name="gpu003", exact=True).click()
    page.wait_for_url(re.compile(r"/clusters/tri/nodes/gpu003/$"))
