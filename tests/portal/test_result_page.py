"""Result, run and node pages as a new user reads them: wide tables in a scroll box, the
ECC counters once, measurements named by their labels, links and breadcrumbs between the pages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.urls import reverse

from portal.catalog.models import CheckDefinition, TestPlanItem
from portal.runs import services
from portal.runs.models import CheckResult
from tests.portal.helpers import add_measurement, set_result

pytestmark = pytest.mark.django_db
CSS = Path(__file__).resolve().parents[2] / "portal" / "static" / "kiln" / "kiln.css"


@pytest.fixture
def viewer_client(client, make_user):
    client.force_login(make_user("vera", "viewer"))
    return client


def page(client, name: str, *args: object) -> str:
    response = client.get(reverse(name, args=args))
    assert response.status_code == 200
    return response.content.decode()


def crumbs(html: str) -> list[tuple[str, str]]:
    nav = re.search(r'<nav class="breadcrumbs" aria-label="Breadcrumbs">(.*?)</nav>', html, re.S)
    assert nav, "no breadcrumbs"
    return re.findall(r'<a href="([^"]+)">([^<]+)</a>', nav.group(1))


def test_the_ecc_page_shows_each_counter_once(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    result = set_result(run, "n02", "ecc-health", "fail", "GPU 5: 3 uncorrectable ECC errors")
    for gpu in range(2):
        add_measurement(result, "ecc_volatile_uncorrected", value=3 * gpu, unit="errors", gpu=gpu, threshold="<= 0")
        add_measurement(result, "ecc_aggregate_corrected", value=0, unit="errors", gpu=gpu)
    add_measurement(result, "xid", value=79, text="GPU has fallen off the bus", gpu=1, labels={"severity": "critical"})
    add_measurement(result, "kernel_log", text="dmesg")

    html = page(viewer_client, "runs:result_detail", result.pk)
    ecc = page(viewer_client, "charts:result_ecc", result.pk)  # the ECC and Xid table, loaded after the page

    assert "ecc_volatile_uncorrected" not in html and "ecc_aggregate_corrected" not in html
    assert "fallen off the bus" not in html and ">kernel_log</td>" in html  # the rest stays listed
    assert '<p class="muted" id="measurements-elsewhere">5 measurements' in html
    assert ecc.count("<th>volatile uncorr.</th>") == 1 and "fallen off the bus" in ecc


def test_an_ecc_result_with_only_counters_does_not_claim_to_have_no_evidence(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    result = set_result(run, "n02", "ecc-health", "pass", "no ECC errors")
    add_measurement(result, "ecc_volatile_uncorrected", value=0, unit="errors", gpu=0)

    html = page(viewer_client, "runs:result_detail", result.pk)

    assert "No measurements" not in html and 'id="measurements-elsewhere">1 measurement (' in html


def test_it_names_each_nic_and_sensor_by_its_label(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    result = set_result(run, "n02", "gpu-inventory", "fail", "mlx5_1: firmware 28.39.1002, expected 28.39.2048")
    for ca, firmware in (("mlx5_0", "28.39.2048"), ("mlx5_1", "28.39.1002")):
        add_measurement(result, "nic_firmware", text=firmware, labels={"ca_type": "MT4129", "ca": ca})
    for sensor, value in (("CPU0_Temp", 61.0), ("Inlet_Temp", 24.0)):
        add_measurement(result, "temperature", value=value, unit="C", labels={"sensor": sensor, "unit": "C"})

    html = page(viewer_client, "runs:result_detail", result.pk)

    rows = re.findall(r"<tr[^>]*><td>(\w+)</td>\s*<td class=\"muted\">([^<]*)</td>", html)
    assert ("nic_firmware", "ca=mlx5_0 ca_type=MT4129") in rows and ("nic_firmware", "ca=mlx5_1 ca_type=MT4129") in rows
    assert ("temperature", "sensor=CPU0_Temp") in rows and ("temperature", "sensor=Inlet_Temp") in rows


def test_wide_measurement_tables_scroll_inside_their_box(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    result = set_result(run, "n02", "gpu-inventory", "pass", "8 GPUs")
    for i in range(30):
        add_measurement(result, f"a_rather_long_metric_name_{i}", value=1.0, unit="W", gpu=0)
    add_measurement(result, "driver_version", text="550.54.15")

    html = page(viewer_client, "runs:result_detail", result.pk)

    for table in ("node-measurements", "gpu-measurements"):
        assert re.search(rf'<div class="table-wrap">\s*<table id="{table}"', html), table
    css = CSS.read_text()
    assert re.search(r"\.table-wrap \{[^}]*overflow-x: auto", css)
    assert re.search(r"\.pivot th \{[^}]*overflow-wrap: anywhere", css)  # snake_case headers may break


def test_the_result_page_links_node_run_and_cluster(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    result = set_result(run, "n02", "gpu-inventory", "pass", "8 GPUs")

    html = page(viewer_client, "runs:result_detail", result.pk)

    node_url = reverse("history:node_detail", args=["c1", "n02"])
    assert crumbs(html) == [
        ("/clusters/", "Clusters"),
        (reverse("inventory:cluster_detail", args=["c1"]), "c1"),
        (reverse("runs:run_detail", args=[run.pk]), f"run #{run.pk}"),
        (node_url, "n02"),
        (reverse("runs:result_detail", args=[result.pk]), "gpu-inventory"),
    ]
    assert f'on <a href="{node_url}">n02</a></h1>' in html


def test_a_multi_node_result_links_each_member(viewer_client, cluster, quick_plan) -> None:
    TestPlanItem.objects.create(plan=quick_plan, check_definition=CheckDefinition.objects.get(slug="fs-aggregate"))
    run = services.run_start(cluster=cluster, plan=quick_plan, enqueue=False)
    group = CheckResult.objects.get(run=run, scope="group")
    CheckResult.objects.filter(pk=group.pk).update(
        status="fail", attribution={"n03": {"status": "fail", "reason": "12 GB/s < 20 GB/s"}}
    )

    html = page(viewer_client, "runs:result_detail", group.pk)

    assert [text for _, text in crumbs(html)][-2:] == [f"run #{run.pk}", group.item_key]
    assert f'<td><a href="{reverse("history:node_detail", args=["c1", "n03"])}">n03</a></td>' in html


def test_run_and_node_pages_have_breadcrumbs_and_link_checks(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    result = set_result(run, "n01", "ecc-health", "pass", "no ECC errors")

    run_html = page(viewer_client, "runs:run_detail", run.pk)
    node_html = page(viewer_client, "history:node_detail", "c1", "n01")

    assert [text for _, text in crumbs(run_html)] == ["Clusters", "c1", f"run #{run.pk}"]
    assert [text for _, text in crumbs(node_html)] == ["Clusters", "c1", "n01"]
    result_url = reverse("runs:result_detail", args=[result.pk])
    assert f'<td><a href="{result_url}">ecc-health</a>' in node_html  # the timeline's check
    assert f'<a href="{reverse("runs:run_detail", args=[run.pk])}">#{run.pk}</a>' in node_html
    assert "{#" not in run_html and "#}" not in run_html  # no template comment printed as text
