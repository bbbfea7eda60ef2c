"""Page 1 of the demo certificate (`kiln_demo --certificate`, issued in this process on the demo's
simulated nodes, without the CPU hog of test_demo_certificate.py): both exceptions by name with their
reasons and the waiver's text, and both signers with their full names and organisations."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from portal.certificates import document
from portal.demo.certificate import (
    CUSTOMER_ORGANISATION,
    OUT_OF_SCOPE,
    VENDOR_ORGANISATION,
    WAIVER,
    demo_certificate_write,
)
from tests.certificates.test_cover import flat, page_text

pytestmark = pytest.mark.integration


# The demo acceptance plan takes two to three minutes here; more on a loaded machine.
@pytest.mark.timeout(900)
def test_page_1_of_the_demo_certificate_names_the_exceptions_and_the_signers(demo, tmp_path: Path) -> None:
    said: list[str] = []
    certificate = demo_certificate_write(out=tmp_path / "demo.pdf", say=said.append)
    data = (tmp_path / "demo.pdf").read_bytes()
    page1 = page_text(data, tmp_path)
    text = flat(page1)

    assert "PASS WITH WAIVERS" in text and "Scope 7 of 8 nodes, 56 GPUs identified · 1 out of scope" in text
    # demo06, out of scope, with its reason; demo03's ECC failure, its value against the limit, the waiver.
    assert "demo06 Out of scope Reason: " + OUT_OF_SCOPE["demo06"] in text, page1
    assert "demo03 Waived: ECC and Xid ecc_volatile_uncorrected [GPU 5]: 2 against ≤ 0" in text, page1
    assert "Waiver: " + WAIVER in text, page1
    assert f"Vera Vendor, {VENDOR_ORGANISATION} (vendor)" in text, "who approved the waiver"
    # The signatories: side, full name, organisation, time.
    layout = page_text(data, tmp_path, layout=True)
    assert re.search(rf"Vendor\s+Vera Vendor\s+{VENDOR_ORGANISATION}\s+\d{{4}}-\d\d-\d\dT", layout), layout
    assert re.search(rf"Customer\s+Carl Customer\s+{CUSTOMER_ORGANISATION}\s+\d{{4}}-\d\d-\d\dT", layout), layout
    assert "Exceptions in full" not in flat(page_text(data, tmp_path, 2, 2)), "the demo's two fit on page 1"
    assert document.headline_mismatch(data, json.loads(certificate.payload)) == ""
