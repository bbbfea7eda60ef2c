"""What page 1 of the demo certificate must say on its own: both exceptions by name with their
reasons and the waiver's text, and both signers with their full names and organisations
(tests/certificates/test_demo_certificate.py reads it from the demo issued beside a CPU hog)."""

from __future__ import annotations

import re
from pathlib import Path

from portal.demo.certificate import CUSTOMER_ORGANISATION, OUT_OF_SCOPE, VENDOR_ORGANISATION, WAIVER
from tests.certificates.test_cover import flat, page_text


def assert_page_1_decides(data: bytes, folder: Path) -> None:
    page1 = page_text(data, folder)
    text = flat(page1)
    assert "PASS WITH WAIVERS" in text and "Scope 7 of 8 nodes, 56 GPUs identified · 1 out of scope" in text, page1
    # demo06, out of scope, with its reason; demo03's ECC failure, its value against the limit, the waiver.
    assert "demo06 Out of scope Reason: " + OUT_OF_SCOPE["demo06"] in text, page1
    assert "demo03 Waived: ECC and Xid ecc_volatile_uncorrected [GPU 5]: 2 against ≤ 0" in text, page1
    assert "Waiver: " + WAIVER in text, page1
    assert f"Vera Vendor, {VENDOR_ORGANISATION} (vendor)" in text, "who approved the waiver"
    # The signatories: side, full name, organisation, time.
    layout = page_text(data, folder, layout=True)
    assert re.search(rf"Vendor\s+Vera Vendor\s+{VENDOR_ORGANISATION}\s+\d{{4}}-\d\d-\d\dT", layout), layout
    assert re.search(rf"Customer\s+Carl Customer\s+{CUSTOMER_ORGANISATION}\s+\d{{4}}-\d\d-\d\dT", layout), layout
    assert "Exceptions in full" not in flat(page_text(data, folder, 2, 2)), "the demo's two fit on page 1"
