"""Two Kiln sites that trust each other: each imports the other's `kiln_keys export-public` bundle and
verifies the other's certificates as valid, even when their per-site counters give the same number."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction

from portal.certificates import keys, seal, services, verification
from portal.certificates.services import issuing


def _verify(data: bytes, tmp_path: Path) -> tuple[int, dict]:
    path = tmp_path / "candidate.pdf"
    path.write_bytes(data)
    out = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("kiln_verify", str(path), "--json", stdout=out)
    return int(exited.value.code), json.loads(out.getvalue())


def _keys(*args: str) -> str:
    out = io.StringIO()
    call_command("kiln_keys", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def signed_campaign(campaign, campaign_run, users):
    """A campaign both sides signed, not yet issued."""
    campaign_run()
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.certificate_sign(campaign=campaign, user=users["customer"])
    return campaign


@pytest.mark.parametrize("numbers", ["site-tagged", "old-colliding"])
def test_two_sites_trust_each_other_and_verify_each_others_certificates(
    signed_campaign, settings, site_key, tmp_path, monkeypatch, numbers
):
    if numbers == "old-colliding":  # the numbers certificates issued before the site tag carry
        monkeypatch.setattr(issuing, "site_tag", lambda identity: "")
    site_a, site_b = str(site_key), str(tmp_path / "site-b")
    settings.KILN_KEY_DIR = site_b
    keys.keyring_init(site="Site B")
    with transaction.atomic():  # site B issues, and its record lives in site B's database, not here
        from_b = issuing.certificate_issue(campaign_id=signed_campaign.pk)
        pdf_b, number_b = bytes(from_b.pdf), from_b.number
        transaction.set_rollback(True)
    bundle_b = tmp_path / "site-b.pem"
    bundle_b.write_text(_keys("export-public"))

    settings.KILN_KEY_DIR = site_a
    from_a = issuing.certificate_issue(campaign_id=signed_campaign.pk)
    assert (from_a.number == number_b) is (numbers == "old-colliding"), (from_a.number, number_b)
    bundle_a = tmp_path / "site-a.pem"
    bundle_a.write_text(_keys("export-public"))
    assert _verify(pdf_b, tmp_path)[0] == 2, "site B's keys are not trusted yet"

    printed = _keys("trust", str(bundle_b))
    assert printed.count("trusted ca ") == 1 and printed.count("trusted seal ") == 1, printed
    code, answer = _verify(pdf_b, tmp_path)
    assert (code, answer["status"], answer["number"]) == (0, "valid", number_b), answer
    assert any("another site's key" in note for note in answer["notes"]), answer["notes"]
    assert _verify(bytes(from_a.pdf), tmp_path)[0] == 0, "its own certificate still checks against its records"

    settings.KILN_KEY_DIR = site_b
    assert "trusted seal " in _keys("trust", str(bundle_a))
    assert _verify(bytes(from_a.pdf), tmp_path)[:1] == (0,)


def test_numbers_name_the_site_by_its_seal_key(signed_campaign, site_key):
    certificate = issuing.certificate_issue(campaign_id=signed_campaign.pk)
    identity = keys.signing_identity_load()
    tag = seal.sha256_hex(seal.public_raw(identity.seal_key.public_key()))[:8]
    assert certificate.number == f"KILN-c1-{tag}-{certificate.issued_at:%Y%m%d}-001"


def test_a_long_cluster_name_still_fits_the_number(campaign, campaign_run, users):
    campaign.cluster.name = "c" * 63  # the longest a cluster name may be
    campaign.cluster.save()
    campaign_run()
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.certificate_sign(campaign=campaign, user=users["customer"])
    certificate = issuing.certificate_issue(campaign_id=campaign.pk)
    assert len(certificate.number) <= 64 and certificate.number.endswith("-001")
    assert verification.certificate_verify(data=bytes(certificate.pdf)).status == seal.VALID, "page 1 states it"


def test_trust_refuses_what_it_cannot_read_and_trusts_nothing_from_it(tmp_path):
    before = keys.trust_store_load().keys
    for name, text in [
        ("empty.pem", "no PEM here\n"),
        ("broken.pem", "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"),
        ("private.pem", (Path(keys.key_dir()) / "ca.key.pem").read_text()),
    ]:
        path = tmp_path / name
        path.write_text(keys.public_export() + text if name != "empty.pem" else text)
        with pytest.raises(CommandError) as refused:
            _keys("trust", str(path))
        assert name in str(refused.value)
    assert keys.trust_store_load().keys == before, "a refused bundle imports nothing"
