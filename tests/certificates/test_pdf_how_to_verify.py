"""The certificate's last page says how anyone verifies it: a PDF reader's signature panel,
`kiln verify`, the public verify page at KILN_PUBLIC_URL, and the site CA's SHA-256 fingerprint."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from pypdf import PdfReader

from portal.certificates import keys, pdf

pytestmark = pytest.mark.skipif(not shutil.which("pdftotext"), reason="poppler-utils (pdftotext) missing")


def _last_page(document: bytes, tmp_path: Path) -> str:
    path = tmp_path / "certificate.pdf"
    path.write_bytes(document)
    last = str(len(PdfReader(io.BytesIO(document)).pages))
    return subprocess.run(
        ["pdftotext", "-f", last, "-l", last, str(path), "-"], capture_output=True, text=True, check=True
    ).stdout


def _squeezed(text: str) -> str:
    """Without white space: a fingerprint wraps inside its table cell."""
    return re.sub(r"\s+", "", text)


@pytest.fixture
def issued_with_url(db, settings, request):
    settings.KILN_PUBLIC_URL = "https://kiln.example.com"
    return request.getfixturevalue("issued")


def test_the_last_page_says_how_to_verify_with_the_public_url_and_the_ca_fingerprint(issued_with_url, tmp_path):
    text = _last_page(bytes(issued_with_url.pdf), tmp_path)
    assert "How to verify this certificate" in text
    assert "signature panel" in text and "kiln verify THIS.pdf" in text
    assert "https://kiln.example.com/verify/" in _squeezed(text)
    fingerprint = keys.cert_fingerprint(keys.site_ca())
    assert fingerprint.startswith("SHA256:") and _squeezed(fingerprint) in _squeezed(text)
    assert "kiln keys ca" in text


def test_without_a_public_url_the_line_is_left_out(issued, tmp_path):
    text = _last_page(bytes(issued.pdf), tmp_path)
    assert "How to verify this certificate" in text and "kiln verify THIS.pdf" in text
    assert "no account needed" not in text and "/verify/" not in _squeezed(text)
    assert _squeezed(keys.cert_fingerprint(keys.site_ca())) in _squeezed(text)


def test_with_the_public_page_off_no_url_is_printed(settings):
    settings.KILN_PUBLIC_URL = "https://kiln.example.com"
    assert pdf.public_verify_url() == "https://kiln.example.com/verify/"
    settings.KILN_VERIFY_PUBLIC_CONCURRENCY = 0
    assert pdf.public_verify_url() == ""


def test_the_fingerprint_printed_is_the_ca_the_signature_chains_to(issued, tmp_path):
    """The printed fingerprint is the one pdfsig and the readers show for the signer's issuer, and a
    rotation keeps the CA (and so the fingerprint customers compare)."""
    identity = keys.signing_identity_load()
    anchor = keys.trust_anchor(identity)
    assert anchor.subject == identity.pdf_cert.issuer and anchor.subject == keys.site_ca().subject
    rotated, _ = keys.keyring_rotate()
    assert keys.cert_fingerprint(keys.trust_anchor(rotated)) == keys.cert_fingerprint(anchor)
