"""The site's signing keys: made only by kiln_keys, written atomically with mode 0600, never at first use."""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from portal.certificates import keys


@pytest.fixture
def empty_keys(settings, tmp_path: Path) -> Path:
    settings.KILN_KEY_DIR = str(tmp_path / "fresh")
    return Path(settings.KILN_KEY_DIR)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_init_makes_private_keys_0600_in_a_0700_folder(empty_keys):
    out = io.StringIO()
    call_command("kiln_keys", "init", "--site", "Hall 7", stdout=out)
    identity = keys.signing_identity_load()
    folder = empty_keys / "current"
    assert _mode(empty_keys) == 0o700
    for private in (folder / keys.SEAL_KEY, folder / keys.PDF_KEY, empty_keys / keys.CA_KEY):
        assert _mode(private) == 0o600, private
    assert "Hall 7" in identity.pdf_cert.subject.rfc4514_string()
    assert "ca " in out.getvalue() and "seal " in out.getvalue()


def test_init_refuses_to_overwrite_and_if_missing_is_quiet(empty_keys):
    call_command("kiln_keys", "init", stdout=io.StringIO())
    before = (empty_keys / "current" / keys.SEAL_KEY).read_bytes()
    with pytest.raises(CommandError, match="already holds site keys"):
        call_command("kiln_keys", "init", stdout=io.StringIO())
    call_command("kiln_keys", "init", "--if-missing", stdout=io.StringIO())
    assert (empty_keys / "current" / keys.SEAL_KEY).read_bytes() == before


def test_nothing_is_created_when_keys_are_missing(empty_keys):
    with pytest.raises(keys.KeyringError, match="kiln keys init"):
        keys.signing_identity_load()
    assert not empty_keys.exists()
    assert keys.trust_store_load().keys == ()


def test_a_full_disk_leaves_no_truncated_key_and_init_runs_again(empty_keys, monkeypatch):
    real_fsync = os.fsync
    calls = []

    def full_after_a_few(fd: int) -> None:  # the disk fills up during the third file
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_after_a_few)
    with pytest.raises(OSError, match="No space left"):
        keys.keyring_init(site="x")
    monkeypatch.setattr(os, "fsync", real_fsync)
    leftovers = [p for p in empty_keys.rglob("*") if p.is_file()]
    assert leftovers and all(p.stat().st_size > 0 and not p.name.startswith(".") for p in leftovers), leftovers
    with pytest.raises(keys.KeyringError, match="kiln keys init"):
        keys.signing_identity_load()
    keys.keyring_init(site="x")  # once there is room again
    assert keys.signing_identity_load().seal_key


def test_an_empty_key_file_is_named_not_loaded(empty_keys):
    keys.keyring_init(site="x")
    (empty_keys / "current" / keys.SEAL_KEY).write_bytes(b"")
    with pytest.raises(keys.KeyringError, match="is empty"):
        keys.signing_identity_load()


def test_export_public_holds_no_private_key(empty_keys):
    keys.keyring_init(site="x")
    out = io.StringIO()
    call_command("kiln_keys", "export-public", stdout=out)
    text = out.getvalue()
    assert "BEGIN CERTIFICATE" in text and "BEGIN PUBLIC KEY" in text
    assert "PRIVATE" not in text


def test_import_uses_the_sites_own_certificate(empty_keys, tmp_path):
    """A site PKI: a CA (here made by another keyring) issues the PDF-signing certificate."""
    from cryptography.hazmat.primitives import serialization

    ca_key, ca_cert = keys._ca_build("Site PKI")
    signer_key, signer_cert = keys._signer_build("Site PKI", ca_key, ca_cert)
    (tmp_path / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "cert.pem").write_bytes(signer_cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(keys._private_pem(signer_key))
    (tmp_path / "other.pem").write_bytes(keys._private_pem(keys._ca_build("x")[0]))
    with pytest.raises(CommandError, match="not the private key"):
        call_command("kiln_keys", "import", "--cert", str(tmp_path / "cert.pem"), "--key", str(tmp_path / "other.pem"),
                     "--ca", str(tmp_path / "ca.pem"), stdout=io.StringIO())  # fmt: skip
    call_command("kiln_keys", "import", "--cert", str(tmp_path / "cert.pem"), "--key", str(tmp_path / "key.pem"),
                 "--ca", str(tmp_path / "ca.pem"), stdout=io.StringIO())  # fmt: skip
    identity = keys.signing_identity_load()
    assert keys.cert_sha256(identity.pdf_cert) == keys.cert_sha256(signer_cert)
    assert not (empty_keys / keys.CA_KEY).exists()
    with pytest.raises(CommandError, match="imported"):
        call_command("kiln_keys", "rotate", stdout=io.StringIO())


def test_the_trust_store_names_each_keys_role_and_the_export_leaves_out_the_signer(empty_keys):
    keys.keyring_init(site="x")
    store = keys.trust_store_load()
    roles = sorted(k.role for k in store.keys)
    assert roles == [keys.KeyRole.CA, keys.KeyRole.SEAL, keys.KeyRole.SIGNER]
    seal = next(k for k in store.keys if k.role is keys.KeyRole.SEAL)
    assert store.seal_fingerprints == {seal.fingerprint}
    headers = [line.split()[1] for line in keys.public_export().splitlines() if line.startswith("# ")]
    assert sorted(headers) == ["ca", "seal"]


@pytest.mark.django_db
def test_the_verify_page_labels_each_site_key_by_its_role(empty_keys, client, users):
    keys.keyring_init(site="x")
    client.force_login(users["viewer"])
    page = client.get(reverse("certificates:certificate_verify")).content.decode()
    table = page.split('id="site-keys"', 1)[1].split("</table>", 1)[0]
    for role in keys.KeyRole:
        assert f"<td>{role.label}</td>" in table
