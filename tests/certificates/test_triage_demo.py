"""The triage view on the demo cluster (simulated nodes, local transport), run inline like
test_acceptance_path.py. The plan is the built-in quick sweep (gpu-inventory, sw-consistency,
ecc-health, gpu-links, ib-ports, idle temperatures; about 15 s here): demo-acceptance takes about two
minutes on this machine, too slow for a unit test, and judges the same two faults."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from checks.core.presentation import REINSTALL_DRIVER, RMA
from portal.certificates.models import Campaign
from portal.demo.cluster import demo_serial
from portal.inventory.models import Node
from portal.runs.models import Run
from portal.runs.triage import run_triage
from portal.runs.triage_export import rma_text
from testbed.sim import write_state
from tests.certificates.conftest import execute_inline


def test_the_demo_run_triages_to_exactly_the_two_faults(demo, client, users):
    client.force_login(users["operator"])
    client.post(reverse("certificates:campaign_list"), {"cluster": "demo", "plan": "quick", "name": "triage"})
    campaign = Campaign.objects.get()
    client.post(reverse("certificates:campaign_run_start", args=[campaign.pk]), {"node_set": ""})
    run = Run.objects.get()
    execute_inline(run)

    lines = run_triage(run_id=run.pk)
    assert [(ln.node_set, ln.count, ln.status) for ln in lines] == [("demo03", 1, "fail"), ("demo06", 1, "fail")]
    ecc, driver = lines
    serial = (
        run.results.get(node__hostname="demo03", item_key="gpu-inventory")
        .measurements.get(name="gpu_serial", gpu=5)
        .text
    )
    assert serial and [(g.index, g.serial) for _, g in ecc.gpus] == [(5, serial)]
    assert ecc.checks == ["ECC and Xid"] and ecc.action == RMA and "RMA" in ecc.action
    assert ecc.rules == ["ecc_volatile_uncorrected <= 0"]
    # The wrong driver fails the inventory and the software check: one cause, one line.
    assert driver.checks == ["GPU inventory", "Software and firmware"]
    assert driver.action == REINSTALL_DRIVER and "reinstall the pinned driver" in driver.action
    (evidence,) = [e for m in driver.members for e in m.evidence]
    assert evidence.measured == "535.104.05" and "550.54.15" in evidence.threshold
    assert f"GPU 5: serial {serial}, PCI bus id 00000000:AB:00.0" in rma_text(lines)
    # The chassis serial the demo imports with its nodes, as a site's asset list would give it.
    assert f"Node serial: {demo_serial(3)}\n" in rma_text(lines, hostname="demo03")

    # A viewer sees the same two lines on the run page and on the campaign page.
    client.force_login(users["viewer"])
    for url in (reverse("runs:run_detail", args=[run.pk]), reverse("certificates:campaign_detail", args=[campaign.pk])):
        page = client.get(url).content.decode()
        assert page.count('class="triage-line"') == 2, url
        assert "535.104.05" in page and "reinstall the pinned driver" in page and serial in page
    response = client.get(reverse("certificates:campaign_triage_csv", args=[campaign.pk]))
    assert response.status_code == 200 and len(response.content.decode().strip().splitlines()) == 3

    # demo05 develops the same ECC fault on GPU 2: one line for both nodes on the re-run.
    node = Node.objects.get(hostname="demo05")
    nodes = settings.DATA_DIR / "demo" / "nodes"
    write_state(nodes / "demo05" / "state", node="demo05", listen_address=node.address, ecc_uncorrectable_gpu=2)
    client.force_login(users["operator"])
    client.post(reverse("certificates:campaign_run_start", args=[campaign.pk]), {"node_set": "demo[03,05]"})
    rerun = Run.objects.exclude(pk=run.pk).get()
    execute_inline(rerun)
    (line,) = run_triage(run_id=rerun.pk)
    assert (line.node_set, line.count, line.action) == ("demo[03,05]", 2, RMA)
    assert [(h, g.index) for h, g in line.gpus] == [("demo03", 5), ("demo05", 2)]
