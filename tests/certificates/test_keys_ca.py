"""`kiln keys ca`: the site CA a customer imports into a PDF reader, and the fingerprint to compare."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from django.core.management import CommandError, call_command

from portal.certificates import keys


def _ca(*args: str) -> str:
    out = io.StringIO()
    call_command("kiln_keys", "ca", *args, stdout=out)
    return out.getvalue()


def test_it_prints_the_ca_fingerprint_and_its_pem():
    text = _ca()
    ca = keys.site_ca()
    assert f"SHA-256 fingerprint: {keys.cert_fingerprint(ca)}\n" in text
    assert "Kiln site CA (Test site)" in text
    assert x509.load_pem_x509_certificate(text[text.index("-----BEGIN") :].encode()) == ca


def test_pem_alone_is_a_file_a_reader_imports(tmp_path: Path):
    text = _ca("--pem")
    assert text.startswith("-----BEGIN CERTIFICATE-----") and text.rstrip().endswith("-----END CERTIFICATE-----")
    assert x509.load_pem_x509_certificates(text.encode()) == [keys.site_ca()]


@pytest.mark.skipif(not shutil.which("openssl"), reason="openssl missing")
def test_the_fingerprint_is_the_one_openssl_shows(tmp_path: Path):
    pem = tmp_path / "ca.pem"
    pem.write_text(_ca("--pem"))
    shown = subprocess.run(
        ["openssl", "x509", "-in", str(pem), "-noout", "-fingerprint", "-sha256"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert shown.strip().split("=", 1)[1] == keys.cert_fingerprint(keys.site_ca()).removeprefix("SHA256:")


def test_without_keys_it_says_what_to_run(settings, tmp_path: Path):
    settings.KILN_KEY_DIR = str(tmp_path / "none")
    with pytest.raises(CommandError, match="kiln keys init"):
        _ca()
    assert not (tmp_path / "none").exists(), "nothing is created"


def test_a_rotation_keeps_the_ca(tmp_path: Path):
    before = _ca()
    keys.keyring_rotate()
    assert _ca() == before
