"""The certificate PDF: page 1 as a PNG (pdftoppm), the verdict and the cluster name in its text
(pdftotext), the payload attached, charts drawn or said to be left out."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from portal.certificates import charts, pdf
from portal.inventory.models import Cluster

needs_poppler = pytest.mark.skipif(
    not (shutil.which("pdftoppm") and shutil.which("pdftotext")), reason="poppler-utils (pdftoppm, pdftotext) missing"
)


def _text(document: bytes, tmp_path: Path) -> str:
    path = tmp_path / "c.pdf"
    path.write_bytes(document)
    return subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def named_cluster(cluster: Cluster) -> Cluster:
    Cluster.objects.filter(pk=cluster.pk).update(customer="Acme Research", site="Hall 7")
    cluster.refresh_from_db()
    return cluster


@needs_poppler
def test_it_renders_page_one_with_the_verdict_and_the_cluster(named_cluster, issued, tmp_path):
    path = tmp_path / "cert.pdf"
    path.write_bytes(bytes(issued.pdf))
    subprocess.run(
        ["pdftoppm", "-f", "1", "-l", "1", "-r", "50", "-png", str(path), str(tmp_path / "page")], check=True
    )
    png = next(tmp_path.glob("page*.png")).read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    first_page = subprocess.run(
        ["pdftotext", "-f", "1", "-l", "1", str(path), "-"], capture_output=True, text=True, check=True
    ).stdout
    assert "PASS WITH WAIVERS" in first_page
    assert "Cluster" in first_page and "c1" in first_page.split()
    assert "Acme Research" in first_page and issued.number in first_page
    text = _text(bytes(issued.pdf), tmp_path)
    assert "GPU 0 replaced under RMA" in text  # the waiver's justification
    assert "GPU-n01-0" in text  # GPU identities
    assert issued.sha256 in text.replace(" ", "")
    assert "Charts were left out" in text


def test_it_attaches_the_exact_signed_payload(issued):
    payload_bytes, seal_data = pdf.pdf_extract(bytes(issued.pdf))
    assert payload_bytes == issued.payload.encode()
    assert seal_data == issued.seal


def test_it_says_charts_are_left_out_without_chromium(settings, monkeypatch):
    settings.KILN_CERT_CHARTS = "1"
    settings.BROWSER_PATH = "/nonexistent/chromium"
    result, note = charts.charts_render(result_ids=[], items=[])
    assert result == [] and "no Chromium" in note


@needs_poppler
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian's chromium is not installed")
def test_it_draws_the_busbw_chart_as_svg_with_chromium(settings, monkeypatch, cluster, users, tmp_path):
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
    from portal.certificates import services
    from portal.runs.models import Series
    from tests.certificates.conftest import finish

    settings.KILN_CERT_CHARTS = "1"
    settings.BROWSER_PATH = "/usr/bin/chromium"
    plan = TestPlan.objects.create(slug="nccl", name="nccl")
    TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug="nccl-allreduce"))
    campaign = services.campaign_create(cluster=cluster, plan=plan, name="nccl", user=users["operator"])
    run = services.campaign_run_start(campaign=campaign, node_set="", user=users["operator"], enqueue=False)
    for result in run.results.all():
        Series.objects.create(
            result=result, name="busbw", unit="GB/s", x_unit="B", x=[1 << 20, 1 << 30], y=[20.0, 480.0]
        )
    finish(run)
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.certificate_sign(campaign=campaign, user=users["customer"])
    certificate = services.certificate_issue(campaign_id=campaign.pk)
    assert certificate.charts_note == ""
    text = _text(bytes(certificate.pdf), tmp_path)
    assert "NCCL all-reduce bus bandwidth by message size" in text
    assert "Charts were left out" not in text
