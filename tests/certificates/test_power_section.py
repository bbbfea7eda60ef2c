"""The certificate's "Power and cooling" section: when the campaign cites a heat soak result, the signed
body lists each rack, PDU phase, feed, UPS and loop with its verdict and reason, and the PDF shows them
(with the cluster power and PDU phase figures when charts are drawn); a body that cites no soak is
unchanged, and a certificate with the section verifies offline."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from portal.catalog.models import TestPlan
from portal.certificates import charts, pdf, seal, services, verification
from portal.certificates.payload import body_build
from portal.certificates.selectors import campaign_state
from tests.checks.soak_builder import Soak
from tests.portal.capacity_helpers import record_soak, soak_cluster

needs_poppler = pytest.mark.skipif(not shutil.which("pdftotext"), reason="poppler-utils (pdftotext) missing")
HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def soak_campaign(db, users):
    cluster = soak_cluster()
    plan = TestPlan.objects.get(slug="power-cooling")
    return services.campaign_create(cluster=cluster, plan=plan, name="power and cooling", user=users["operator"])


def soak_run(campaign, users, soak: Soak | None = None, **options):
    run = services.campaign_run_start(campaign=campaign, node_set="", user=users["operator"], enqueue=False)
    return record_soak(campaign.cluster, soak, run=run, **options)


def issue(campaign, users):
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.certificate_sign(campaign=campaign, user=users["customer"])
    return services.certificate_issue(campaign_id=campaign.pk)


def _text(document: bytes, tmp_path: Path) -> str:
    path = tmp_path / "c.pdf"
    path.write_bytes(document)
    return subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True).stdout


def test_it_lists_every_subject_of_the_soak_with_its_verdict_in_the_body(soak_campaign, users):
    result = soak_run(soak_campaign, users, Soak(mis_cabled="pdu-r2-a"))
    body = body_build(state=campaign_state(campaign=soak_campaign))
    (section,) = body["sections"]
    assert section["title"] == "Power and cooling" and section["result_id"] == result.pk
    assert section["status"] == "fail" and section["item_key"] == "power-soak"
    by_kind = {s["kind"]: s for s in section["subjects"]}
    assert [s["kind"] for s in section["subjects"]] == ["rack", "pdu_phase", "feed", "ups", "loop"]
    assert [e["name"] for e in by_kind["rack"]["entries"]] == ["r1", "r2", "r3"]
    assert len(by_kind["pdu_phase"]["entries"]) == 18 and len(by_kind["feed"]["entries"]) == 6
    bad = [e for e in by_kind["pdu_phase"]["entries"] if e["status"] != "pass"]
    assert [e["name"] for e in bad] == ["pdu-r2-a phase 2"] and bad[0]["status"] == "fail"
    assert "54.1 A" in bad[0]["reason"] and "80% of its 63 A breaker" in bad[0]["reason"]
    assert by_kind["ups"]["entries"][0]["name"] == "ups1" and by_kind["loop"]["entries"][0]["name"] == "cdu1"
    assert section["counts"] == {"pass": 28, "fail": 1}
    assert seal.canonical_bytes(body)  # canonical JSON: strings and integers only


def test_it_leaves_a_body_that_cites_no_soak_as_it_was(campaign, campaign_run):
    campaign_run()
    body = body_build(state=campaign_state(campaign=campaign))
    assert "sections" not in body, "bodies signed before sections existed keep their digest"


@needs_poppler
def test_it_shows_the_section_in_the_pdf_and_verifies(soak_campaign, users, tmp_path):
    soak_run(soak_campaign, users, rename={"r1": HOSTILE})
    certificate = issue(soak_campaign, users)
    assert certificate is not None and certificate.verdict == "PASS"
    payload = json.loads(pdf.pdf_extract(bytes(certificate.pdf))[0])
    assert payload["sections"][0]["subjects"][0]["entries"][0]["name"] == HOSTILE
    text = _text(bytes(certificate.pdf), tmp_path)
    section = text.split("Power and cooling", 1)[1]
    for words in ("Racks", "PDU phases", "A/B feeds", "UPS", "Cooling loops", "pdu-r3-b phase 3", "ups1", "cdu1"):
        assert words in section, words
    assert HOSTILE in section, "the name is shown as text (escaped), not taken as markup"
    assert "subjects: 29 pass" in " ".join(section.split())
    assert verification.certificate_verify(data=bytes(certificate.pdf)).status == seal.VALID


@needs_poppler
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian's chromium is not installed")
def test_it_draws_cluster_power_with_the_ups_and_the_phase_bars(soak_campaign, users, settings, tmp_path):
    settings.KILN_CERT_CHARTS = "1"
    settings.BROWSER_PATH = "/usr/bin/chromium"
    result = soak_run(soak_campaign, users)
    drawn, note = charts.charts_render(result_ids=[result.pk], items=soak_campaign.plan_snapshot["items"])
    assert note == ""
    assert [(c.title, c.section) for c in drawn] == [
        ("Cluster power during the soak, with the UPS", result.pk),
        ("Peak current per PDU phase, with 80% of its breaker", result.pk),
    ]
    power, phases = (c.svg.decode() for c in drawn)
    assert "UPS ups1 capacity 120.0 kW" in power and "capacity / 1.2" in power
    assert "pdu-r1-a" in phases and "limit: 80% of the breaker" in phases
    certificate = issue(soak_campaign, users)
    assert certificate.charts_note == ""
    text = _text(bytes(certificate.pdf), tmp_path).split("Power and cooling", 1)[1]
    assert text.index("Cluster power during the soak") < text.index("Racks")
