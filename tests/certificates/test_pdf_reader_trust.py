"""A PDF reader that trusts the site CA (`kiln keys ca`) shows the signature as trusted: poppler's
pdfsig with an NSS database made by certutil, as the user guide says."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from portal.certificates import keys
from tests.conftest import IN_CI

# CI installs both (requirements/debian.txt, test scope): there a missing tool fails the test.
pytestmark = pytest.mark.skipif(
    not (shutil.which("certutil") and shutil.which("pdfsig")) and not IN_CI,
    reason="libnss3-tools (certutil) or poppler-utils (pdfsig) missing",
)


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0 or argv[0] == "pdfsig", done.stderr
    return done.stdout + done.stderr


def _nss_with(ca_pem: Path, folder: Path, trust: str) -> str:
    folder.mkdir()
    nss = f"sql:{folder}"
    _run("certutil", "-N", "-d", nss, "--empty-password")
    _run("certutil", "-A", "-d", nss, "-t", trust, "-n", "kiln-ca", "-i", str(ca_pem))
    return nss


# NSS trust flags are "SSL,email,object signing": pdfsig checks a signer for the email-signing use,
# so the CA needs the middle C; SSL trust alone ("C,,") is not enough.
@pytest.mark.parametrize(("trust", "trusted"), [(",C,", True), ("C,C,", True), ("C,,", False)])
def test_pdfsig_trusts_the_signer_once_the_site_ca_is_in_its_nss_database(issued, tmp_path, trust, trusted):
    document = tmp_path / "certificate.pdf"
    document.write_bytes(bytes(issued.pdf))
    ca_pem = tmp_path / "kiln-ca.pem"
    out = io.StringIO()
    call_command("kiln_keys", "ca", "--pem", stdout=out)
    ca_pem.write_text(out.getvalue())
    empty = tmp_path / "empty"
    empty.mkdir()
    _run("certutil", "-N", "-d", f"sql:{empty}", "--empty-password")
    before = _run("pdfsig", "-nssdir", f"sql:{empty}", str(document))
    assert "Signature is Valid" in before and "Certificate issuer isn't Trusted" in before, before
    after = _run("pdfsig", "-nssdir", _nss_with(ca_pem, tmp_path / "nss", trust), str(document))
    assert "Signature is Valid" in after and ("Certificate is Trusted" in after) is trusted, after
    listed = _run("certutil", "-L", "-d", f"sql:{tmp_path / 'nss'}", "-n", "kiln-ca")
    assert keys.cert_fingerprint(keys.site_ca()).removeprefix("SHA256:") in listed.replace("\n", "").replace(" ", "")
