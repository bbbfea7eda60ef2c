"""The issue's whole path through the pages, on the demo cluster (local transport, simulated nodes):
the acceptance run fails 2 nodes; one node's fault is cleared and both are re-run; the other, still
failing, is waived with a justification; a vendor and a customer approver sign; the PDF downloads and
kiln_verify calls it valid. (A Playwright version can drive the same pages.)"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.urls import reverse

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.certificates import selectors
from portal.certificates.models import Campaign, Certificate
from portal.certificates.tasks import certificate_issue_task
from portal.runs.models import Run
from testbed.sim import write_state
from tests.certificates.conftest import execute_inline

# The demo's simulated nodes (their loopback addresses and ports, the data folder's demo): one at a time.
pytestmark = pytest.mark.exclusive("demo")


@pytest.fixture
def handover_plan(demo) -> TestPlan:
    """The demo cluster (tests/certificates/conftest.py) and a two-check plan (fast)."""
    plan = TestPlan.objects.create(slug="handover", name="Handover (fast checks)")
    for order, slug in enumerate(["gpu-inventory", "ecc-health"]):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    return plan


def test_the_whole_acceptance_path_works_from_the_pages(handover_plan, client, users, tmp_path):
    # An operator opens the campaign and runs the plan on every node.
    client.force_login(users["operator"])
    response = client.post(
        reverse("certificates:campaign_list"), {"cluster": "demo", "plan": "handover", "name": "demo handover"}
    )
    campaign = Campaign.objects.get()
    assert response.url == reverse("certificates:campaign_detail", args=[campaign.pk])
    client.post(reverse("certificates:campaign_run_start", args=[campaign.pk]), {"node_set": ""})
    first = Run.objects.get()
    execute_inline(first)
    assert first.status == "fail"

    # Two nodes fail: demo03 (uncorrectable ECC on a GPU) and demo06 (wrong driver).
    state = selectors.campaign_state(campaign=campaign)
    assert {(c.hostname, c.item_key) for c in state.open_cells} == {
        ("demo03", "ecc-health"),
        ("demo06", "gpu-inventory"),
    }
    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()
    assert 'value="demo[03,06]"' in page  # the re-run form is prefilled with the failed nodes

    # demo06 is re-imaged (fault cleared); demo03's GPU still reports its errors. Both are re-run.
    nodes = settings.DATA_DIR / "demo" / "nodes"
    write_state(nodes / "demo06" / "state", node="demo06")
    client.post(reverse("certificates:campaign_run_start", args=[campaign.pk]), {"node_set": "demo[03,06]"})
    rerun = Run.objects.exclude(pk=first.pk).get()
    execute_inline(rerun)
    state = selectors.campaign_state(campaign=campaign)
    assert [(c.hostname, c.item_key, c.run_id) for c in state.open_cells] == [("demo03", "ecc-health", rerun.pk)]

    # The vendor's approver waives demo03 with a justification; both sides sign.
    client.force_login(users["vendor"])
    client.post(
        reverse("certificates:campaign_waive", args=[campaign.pk]),
        {"hostname": "demo03", "item_key": "ecc-health", "justification": "GPU 5 swap scheduled; customer accepts"},
    )
    client.post(reverse("certificates:campaign_sign", args=[campaign.pk]))
    assert not Certificate.objects.exists()
    client.force_login(users["customer"])
    response = client.post(reverse("certificates:campaign_sign", args=[campaign.pk]), follow=True)
    assert "the certificate is being issued" in response.content.decode()
    assert not Certificate.objects.exists()
    certificate_issue_task.apply(args=[campaign.pk])  # the task the signature queued, run here
    certificate = Certificate.objects.get()
    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()
    assert certificate.number in page and "certificate issued" in page

    # The PDF downloads, says what it certifies, and verifies.
    response = client.get(reverse("certificates:certificate_pdf", args=[certificate.pk]))
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    path = tmp_path / "certificate.pdf"
    path.write_bytes(response.content)
    out = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("kiln_verify", str(path), "--json", stdout=out)
    assert exited.value.code == 0 and json.loads(out.getvalue())["status"] == "valid"
    payload = json.loads(certificate.payload)
    assert payload["verdict"] == "PASS WITH WAIVERS"
    assert [w["node"] for w in payload["waivers"]] == ["demo03"]
    demo06 = next(n for n in payload["nodes"] if n["hostname"] == "demo06")
    assert demo06["checks"]["gpu-inventory"]["run_id"] == rerun.pk
    assert len(demo06["gpus"]) == 8 and all(g["uuid"].startswith("GPU-") for g in demo06["gpus"])
