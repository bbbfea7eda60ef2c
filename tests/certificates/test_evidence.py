"""Format 3: the sealed body holds per-node summaries and digests of each node's detailed evidence;
the evidence is exported as JSON lines and checked against the digests (kiln_verify --evidence).
Certificates issued in format 2 still verify."""

from __future__ import annotations

import json
import shutil
import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from portal.certificates import evidence, export, pdf, seal, verification
from portal.certificates.payload import body_build
from portal.certificates.selectors import campaign_state
from portal.runs.models import CheckResult, Measurement
from tests.portal.helpers import add_measurement

pytestmark = pytest.mark.django_db
FORMAT2 = Path(__file__).resolve().parent.parent / "fixtures" / "certificates" / "format2"


def _export(certificate) -> list[bytes]:
    return list(export.evidence_lines(payload=json.loads(certificate.payload), payload_sha256=certificate.sha256))


def _kiln_verify(tmp_path: Path, pdf_bytes: bytes, lines: list[bytes] | None) -> tuple[int, dict]:
    path = tmp_path / "cert.pdf"
    path.write_bytes(pdf_bytes)
    argv = [str(path), "--json"]
    if lines is not None:
        (tmp_path / "evidence.jsonl").write_bytes(b"".join(lines))
        argv += ["--evidence", str(tmp_path / "evidence.jsonl")]
    out = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("kiln_verify", *argv, stdout=out)
    return exited.value.code, json.loads(out.getvalue())


def test_it_still_verifies_a_certificate_issued_in_format_2(settings, tmp_path):
    settings.KILN_KEY_DIR = str(shutil.copytree(FORMAT2 / "keys", tmp_path / "format2-keys"))
    data = (FORMAT2 / "certificate.pdf").read_bytes()
    verdict = verification.certificate_verify(data=data)
    assert verdict.status == seal.VALID, verdict.detail
    assert verdict.payload and verdict.payload["format"] == "kiln-certificate/2"
    code, answer = _kiln_verify(tmp_path, data, [b"{}\n"])
    assert code == verification.EVIDENCE_MISMATCH_EXIT and answer["status"] == "valid", "nothing to check it by"
    assert not answer["evidence"]["ok"] and "carries its evidence in its payload" in answer["evidence"]["detail"]


def test_the_digests_match_the_evidence_in_the_database(issued):
    payload = json.loads(issued.payload)
    assert payload["format"] == seal.FORMAT
    header, *lines = _export(issued)
    assert json.loads(header)["payload_sha256"] == issued.sha256
    nodes = {n["hostname"]: n for n in payload["nodes"]}
    records = {}
    for line in lines[: len(nodes)]:
        record = json.loads(line)
        assert seal.sha256_hex(line.rstrip(b"\n")) == nodes[record["node"]]["evidence_sha256"]
        assert line.rstrip(b"\n") == seal.canonical_bytes(record), "each line is canonical JSON"
        records[record["node"]] = {r["item_key"]: r for r in record["results"]}
    ecc = records["n02"]["ecc-health"]
    stored = Measurement.objects.get(result_id=ecc["result_id"], name="volatile_uncorrected")
    assert ecc["measurements"] == [["volatile_uncorrected", "2.0", "", "", 0, "<= 0", False, {}]]
    assert (stored.value, stored.ok) == (2.0, False)
    result = CheckResult.objects.get(pk=ecc["result_id"])
    assert (ecc["status"], ecc["command"], ecc["reason"]) == (result.status, result.command, result.reason)


def test_a_node_summary_stays_bounded_however_much_evidence_it_has(campaign, campaign_run):
    run = campaign_run(statuses={("n02", "ecc-health"): "fail"})
    before = body_build(state=campaign_state(campaign=campaign))
    result = run.results.get(node__hostname="n02", item_key="ecc-health")
    for i in range(400):  # a node with 400 more out-of-spec figures
        add_measurement(result, f"extra_{i:03d}", gpu=i % 8, value=float(i), threshold="<= 0", ok=False)
    after = body_build(state=campaign_state(campaign=campaign))
    size = {h: len(seal.canonical_bytes(n)) for h, n in ((n["hostname"], n) for n in after["nodes"])}
    grew = size["n02"] - len(seal.canonical_bytes(before["nodes"][1]))
    assert 0 < grew < 1500, grew
    n02 = after["nodes"][1]["checks"]["ecc-health"]
    assert n02["out_of_spec_count"] == 401 and len(n02["out_of_spec"]) == 8
    assert after["nodes"][1]["evidence_sha256"] != before["nodes"][1]["evidence_sha256"]
    assert after["nodes"][0] == before["nodes"][0], "another node's summary and digest do not move"
    assert after["evidence"]["measurements"] == before["evidence"]["measurements"] + 400


def test_an_export_that_matches_verifies(issued, tmp_path):
    code, answer = _kiln_verify(tmp_path, bytes(issued.pdf), _export(issued))
    assert (code, answer["status"]) == (0, "valid"), answer
    assert answer["evidence"]["ok"] and answer["evidence"]["checked"] == len(json.loads(issued.payload)["nodes"])


def test_tampered_evidence_of_one_node_is_detected_and_named(issued, tmp_path):
    lines = _export(issued)
    at = next(i for i, line in enumerate(lines) if b'"node":"n02"' in line)
    assert b'"volatile_uncorrected","2.0"' in lines[at]
    lines[at] = lines[at].replace(b'"volatile_uncorrected","2.0"', b'"volatile_uncorrected","0.0"')
    code, answer = _kiln_verify(tmp_path, bytes(issued.pdf), lines)
    assert code == verification.EVIDENCE_MISMATCH_EXIT and answer["status"] == "valid"
    assert answer["evidence"]["mismatched"] == ["node n02"]
    assert "node n02 does not match its sealed digest" in answer["evidence"]["detail"]


def test_a_missing_or_reformatted_node_is_told_apart(issued):
    digests = seal.sealed_digests(json.loads(issued.payload))
    header, *lines = _export(issued)
    pretty = [json.dumps(json.loads(line), indent=None).encode() + b"\n" for line in lines]
    assert export.evidence_verify(lines=[header, *pretty], digests=digests).ok, "same JSON, other spacing"
    dropped = [line for line in lines if b'"node":"n03"' not in line]
    check = export.evidence_verify(lines=[header, *dropped], digests=digests)
    assert not check.ok and check.missing == ["node n03"] and "n03 is missing" in check.detail


def test_the_portal_streams_the_export(issued, client, users):
    client.force_login(users["viewer"])
    response = client.get(reverse("certificates:certificate_evidence", args=[issued.pk]))
    assert response.status_code == 200 and response["Content-Type"] == "application/jsonl"
    assert b"".join(response.streaming_content) == b"".join(_export(issued))


def test_kiln_evidence_writes_the_export(issued, tmp_path):
    path = tmp_path / "e.jsonl"
    call_command("kiln_evidence", issued.number, "-o", str(path), stderr=StringIO())
    assert path.read_bytes() == b"".join(_export(issued))


@pytest.mark.skipif(not shutil.which("pdftotext"), reason="poppler-utils (pdftotext) missing")
def test_the_pdf_lists_every_node_across_parts(monkeypatch, campaign, campaign_run, users, tmp_path):
    from portal.certificates import services

    monkeypatch.setattr(pdf, "NODES_PER_PART", 3)  # 4 nodes: two parts per per-node table
    campaign_run()
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.certificate_sign(campaign=campaign, user=users["customer"])
    certificate = services.certificate_issue(campaign_id=campaign.pk)
    path = tmp_path / "c.pdf"
    path.write_bytes(bytes(certificate.pdf))
    pages = subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True)
    text = pages.stdout.split("\f")
    tables = "".join(text)
    assert "Nodes 1–3 of 4" in tables and "Nodes 4–4 of 4" in tables and "GPU identities, nodes 4–4 of 4" in tables
    for host in ("n01", "n02", "n03", "n04"):
        assert tables.count(f"GPU-{host}-0") == 1
    numbered = [page for page in text if page.strip()]
    assert all(f"page {i}" in page for i, page in enumerate(numbered, start=1)), "page numbers carry on"
    assert verification.certificate_verify(data=bytes(certificate.pdf)).status == seal.VALID


def test_a_record_is_hashed_as_the_seal_canonicalises_it():
    record = {"node": "n1", "results": [{"measurements": [["x", seal.canonical(1.5), "é", "", None, "", True, {}]]}]}
    assert evidence.record_bytes(record) == seal.canonical_bytes(record)
