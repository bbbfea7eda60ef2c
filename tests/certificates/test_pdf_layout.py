"""The certificate PDF reads as finished: numbers in people's units and never in e-notation,
a threshold written like its values, idle and load apart, a cover page with the verdict and the node
counts, serials shown, table headers repeated on every page a table runs onto, and the "Signed at"
timestamps and hashes each whole in their own column."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from portal import formatting
from portal.certificates import seal, services, verification
from portal.certificates.models import Certificate
from portal.inventory.models import Node
from portal.runs.models import CheckResult
from tests.portal.helpers import add_measurement

pytestmark = pytest.mark.skipif(not shutil.which("pdftotext"), reason="poppler-utils (pdftotext) missing")

E_NOTATION = re.compile(r"\d\.?\d*[eE][-+]\d")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
EXTRA_NAMES = 70  # judged measurements enough for the key-measurement table to run onto a second page


def _pages(document: bytes, tmp_path: Path) -> list[str]:
    path = tmp_path / "c.pdf"
    path.write_bytes(document)
    text = subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True).stdout
    return text.split("\f")


def _measure(result: CheckResult) -> None:
    """What the issue's certificate showed badly: bytes/s against a GB/s floor, Gflop/s, one
    temperature in two phases, and enough names to break the table across pages."""
    add_measurement(result, "write_bw_sum", value=6.1e9, unit="B/s", threshold=">= 4 GB/s", ok=True)
    add_measurement(result, "gemm_gflops", value=109400.3, unit="Gflop/s", gpu=0, threshold=">= 1e+05", ok=True)
    for phase, value in (("idle", 34.0), ("load", 78.5)):
        add_measurement(
            result, "temp_gpu_steady", value=value, unit="C", gpu=0, threshold="<= 82", ok=True, labels={"phase": phase}
        )
    for i in range(EXTRA_NAMES):
        add_measurement(result, f"counter_{i:02d}", value=float(i), unit="errors", threshold="<= 100", ok=True)


def _issue(campaign, campaign_run, users) -> Certificate:
    run = campaign_run(statuses={("n02", "ecc-health"): "fail"})
    for result in run.results.filter(item_key="ecc-health"):
        _measure(result)
    services.waiver_grant(
        campaign=campaign, hostname="n02", item_key="ecc-health", justification="GPU 0 replaced under RMA",
        user=users["vendor"],
    )  # fmt: skip
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.certificate_sign(campaign=campaign, user=users["customer"])
    certificate = services.certificate_issue(campaign_id=campaign.pk)
    assert certificate is not None
    assert verification.certificate_verify(data=bytes(certificate.pdf)).status == seal.VALID
    return certificate


@pytest.fixture
def certificate(campaign, campaign_run, users) -> Certificate:
    Node.objects.filter(hostname="n01").update(serial="CHS-0001")
    return _issue(campaign, campaign_run, users)


def test_numbers_are_in_peoples_units_and_never_in_e_notation(certificate, tmp_path) -> None:
    pages = _pages(bytes(certificate.pdf), tmp_path)
    text = "\n".join(pages)
    # Base64 may spell "1e+5" by chance, and the number's hex digest "708e" before "-2026...".
    for secret in (certificate.seal["signature"], certificate.seal["public_key"], certificate.number):
        text = text.replace(secret, "")
    assert not E_NOTATION.search(text), E_NOTATION.search(text)
    measured = next(line for line in text.splitlines() if "Write bandwidth sum" in line)
    assert "≥ 4 GB/s" in measured and "6.1 GB/s" in measured
    gflops = next(line for line in text.splitlines() if "Gemm Gflop/s" in line)
    assert "≥ 100,000 Gflop/s" in gflops and gflops.count("109,400") == 3  # min, median and max, apart


def test_idle_and_load_are_separate_rows_each_against_its_threshold(certificate, tmp_path) -> None:
    lines = "\n".join(_pages(bytes(certificate.pdf), tmp_path)).splitlines()
    idle = [line for line in lines if "Temperature GPU steady · idle" in line]
    load = [line for line in lines if "Temperature GPU steady · load" in line]
    assert len(idle) == 1 and len(load) == 1
    assert "≤ 82 °C" in idle[0] and "34 °C" in idle[0] and "78.5" not in idle[0]
    assert "≤ 82 °C" in load[0] and "78.5 °C" in load[0] and "34 °C" not in load[0]


def test_the_cover_page_has_the_verdict_counts_dates_and_signers(certificate, tmp_path) -> None:
    cover = _pages(bytes(certificate.pdf), tmp_path)[0]
    assert "PASS WITH WAIVERS" in cover and "c1" in cover
    assert re.search(r"Scope\s+4 of 4 nodes", cover)
    # Two counts a line: "Passed every check 3   Not passed 0".
    assert re.search(r"Passed every check\s+3\s+Not passed\s+0\n", cover)
    assert re.search(r"Passed with a waiver\s+1\s+Out of scope\s+0\n", cover)
    assert re.search(r"Exceptions\s+1\s+Waivers\s+1\n", cover)
    assert re.search(r"Vendor\s+vera\s+—", cover) and re.search(r"Customer\s+carl\s+—", cover), "no names set"
    assert len(TIMESTAMP.findall(cover)) >= 4  # issued, testing, signatures


def test_serials_are_shown(certificate, tmp_path) -> None:
    text = "\n".join(_pages(bytes(certificate.pdf), tmp_path))
    assert "CHS-0001" in text  # the node's chassis serial from the inventory
    assert all(f"SNn0{i}0" in text for i in range(1, 5))  # GPU serials from the inventory evidence


def test_without_any_chassis_serial_the_column_is_left_out_and_said_why(campaign, campaign_run, users, tmp_path):
    text = "\n".join(_pages(bytes(_issue(campaign, campaign_run, users).pdf), tmp_path))
    header = next(line for line in text.splitlines() if line.strip().startswith("Node") and "C1" in line)
    assert "Serial" not in header
    assert "No node has a chassis serial" in " ".join(text.split())
    assert "SNn010" in text


def test_every_page_a_table_runs_onto_repeats_its_header(certificate, tmp_path) -> None:
    pages = _pages(bytes(certificate.pdf), tmp_path)
    with_rows = [page for page in pages if re.search(r"^\s*C2 ECC and Xid\s+Counter \d\d", page, re.MULTILINE)]
    assert len(with_rows) >= 2  # the table does run across pages
    for page in with_rows:
        assert re.search(r"Check\s+Measurement\s+Threshold\s+n\s+Min\s+Median\s+Max", page), page[:400]
    for page in pages:  # no header left alone at a page's foot: a header line is followed by a row
        lines = [line for line in page.splitlines() if line.strip()]
        for at, line in enumerate(lines):
            if re.search(r"Check\s+Measurement\s+Threshold", line):
                assert at + 1 < len(lines) and "ECC and Xid" in " ".join(lines[at + 1 : at + 3]), page[-400:]


def test_signed_at_and_the_hash_are_each_whole_in_their_own_column(certificate, tmp_path) -> None:
    pages = _pages(bytes(certificate.pdf), tmp_path)
    page = next(page for page in pages if "Body SHA-256 signed" in page)
    lines = page.splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if "Body SHA-256 signed" in line) :]
    for signature in certificate.signatures.all():
        digest = signature.body_sha256
        name = signature.user.get_username()
        row = next(i for i, line in enumerate(lines) if name in line and TIMESTAMP.search(line))
        stamp = TIMESTAMP.search(lines[row])
        assert stamp is not None
        # The timestamp ends before the hash column starts: space between them, no characters mixed in.
        rest = lines[row][stamp.end() :].split()
        assert rest and digest.startswith(rest[0])
        # The hash wraps within its own column: its pieces, line by line, spell it out whole.
        pieces = [rest[0]] + [line.split()[-1] for line in lines[row + 1 : row + 4] if line.strip()]
        assert digest in "".join(pieces)


def test_the_plan_table_shows_parameters_and_thresholds_with_their_units(certificate, tmp_path) -> None:
    text = "\n".join(_pages(bytes(certificate.pdf), tmp_path))
    plan = text.split("The plan: checks, parameters and thresholds", 1)[1]
    assert not re.search(r"\b[a-z_]+=\S", plan), re.search(r"\b[a-z_]+=\S", plan)  # no raw "k=v" lists
    items = [item for p in json.loads(certificate.payload)["plans"] for item in p["snapshot"]["items"]]
    shown = [(k, v) for item in items for k, v in {**item["params"], **item["thresholds"]}.items()]
    assert shown, "the fixture plan has settings to show"
    for name, value in shown:
        assert f"{name} {formatting.setting(name, value)}" in " ".join(plan.split()), name
