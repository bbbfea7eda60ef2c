"""A trusted time and long-term validity: with a timestamp authority configured, the PDF signature
carries its RFC 3161 timestamp; the signature's validation data (DSS: certificates and the site CA's
CRL) travels with it, so it verifies offline after `kiln keys rotate` and after the signing
certificate expires. A local TSA (tests/certificates/tsa.py) answers, or misbehaves."""

from __future__ import annotations

import base64
import datetime
import io
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from django.core.management import call_command
from django.urls import reverse

from portal.certificates import keys, services, signing
from portal.certificates.models import Certificate
from portal.certificates.tasks import certificate_issue_task
from tests.certificates import tsa as local

pytestmark = pytest.mark.django_db


@pytest.fixture
def tsa(settings, tmp_path: Path) -> Iterator[local.LocalTsa]:
    """A running local TSA that the settings name, its root trusted (KILN_TSA_CA)."""
    with local.local_tsa(tmp_path) as running:
        settings.KILN_TSA_URL = running.url
        settings.KILN_TSA_CA = str(running.root_pem)
        settings.KILN_TSA_TIMEOUT_S = 5
        yield running


@pytest.fixture
def signed(campaign, campaign_run, users):
    """Both sides signed; the test issues (what the task behind the second signature does)."""
    campaign_run()
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.certificate_sign(campaign=campaign, user=users["customer"])
    return campaign


def _verify(data: bytes, tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    path = tmp_path / "candidate.pdf"
    path.write_bytes(data)
    answers = []
    for extra in (["--json"], []):
        out = io.StringIO()
        with pytest.raises(SystemExit) as exited:
            call_command("kiln_verify", str(path), *args, *extra, stdout=out)
        answers.append((int(exited.value.code), out.getvalue()))
    assert answers[0][0] == answers[1][0]
    return answers[0][0], json.loads(answers[0][1]), answers[1][1]


def _token_time(data: bytes) -> datetime.datetime:
    """The genTime of the RFC 3161 token inside the PDF signature, read with asn1crypto alone."""
    from asn1crypto import cms
    from pyhanko.pdf_utils.reader import PdfFileReader

    signature = PdfFileReader(io.BytesIO(data)).embedded_signatures[0]
    attrs = signature.signer_info["unsigned_attrs"]
    assert [a["type"].native for a in attrs] == ["signature_time_stamp_token"]
    token = attrs[0]["values"][0]
    assert isinstance(token, cms.ContentInfo)
    return token["content"]["encap_content_info"]["content"].parsed["gen_time"].native


def _pdfsig(data: bytes, tmp_path: Path) -> str:
    path = tmp_path / "pdfsig.pdf"
    path.write_bytes(data)
    return subprocess.run(["pdfsig", str(path)], capture_output=True, text=True, check=False).stdout


def test_it_stamps_the_signature_and_pdfsig_and_kiln_verify_report_the_time(signed, tsa, tmp_path):
    certificate = services.certificate_issue(campaign_id=signed.pk)
    data = bytes(certificate.pdf)
    stamped_at = _token_time(data)
    assert tsa.served.count(local.GOOD) >= 1

    code, answer, text = _verify(data, tmp_path)
    assert code == 0 and answer["status"] == "valid", answer
    assert answer["time"]["source"] == signing.TIME_TSA
    assert local.TSA_NAME in answer["time"]["tsa"]
    assert datetime.datetime.fromisoformat(answer["time"]["time"]) == stamped_at
    assert f"signed at {stamped_at.isoformat()} (trusted time: RFC 3161 timestamp by" in text
    assert json.loads(certificate.payload)["seal"]["pdf_signature"].startswith("PAdES B-LT")

    # pdfsig (poppler 22.12) validates the timestamped B-LT signature over the whole file; it prints the
    # time the signature dictionary states (/M, the portal's clock), seconds before the TSA's time.
    out = _pdfsig(data, tmp_path)
    assert "Signature is Valid" in out and "Total document signed" in out, out
    line = next(x for x in out.splitlines() if "Signing Time:" in x)
    printed = datetime.datetime.strptime(line.split("Signing Time:")[1].strip(), "%b %d %Y %H:%M:%S")
    assert abs(printed.replace(tzinfo=datetime.UTC) - stamped_at) < datetime.timedelta(minutes=1), out


def test_the_verify_page_and_the_api_show_the_trusted_time(signed, tsa, users, client):
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test import Client

    from portal.api import services as api_services

    data = bytes(services.certificate_issue(campaign_id=signed.pk).pdf)
    client.force_login(users["viewer"])
    upload = SimpleUploadedFile("c.pdf", data, content_type="application/pdf")
    page = client.post(reverse("certificates:certificate_verify"), {"pdf": upload}).content.decode()
    row = page.split('id="verify-time">', 1)[1].split("</td>", 1)[0]
    assert "trusted time, RFC 3161 timestamp by" in row and local.TSA_NAME in row, row
    _, secret = api_services.token_create(user=users["viewer"], name="verify")
    api = Client(SERVER_NAME="localhost", HTTP_AUTHORIZATION=f"Token {secret}")
    upload = SimpleUploadedFile("c.pdf", data, content_type="application/pdf")
    answer = api.post("/api/v1/certificates/verify/", {"pdf": upload}).json()
    assert answer["status"] == "valid" and answer["time"]["source"] == signing.TIME_TSA, answer
    assert datetime.datetime.fromisoformat(answer["time"]["time"]) == _token_time(data)


def test_a_tampered_timestamped_certificate_reports_no_time(signed, tsa, tmp_path):
    data = bytearray(bytes(services.certificate_issue(campaign_id=signed.pk).pdf))
    data[len(data) // 3] ^= 0x01
    code, answer, text = _verify(bytes(data), tmp_path)
    assert code == 1 and answer["time"] == {} and "signed at" not in text, answer


def test_without_a_tsa_the_time_is_the_portals_clock(signed, tmp_path):
    certificate = services.certificate_issue(campaign_id=signed.pk)
    code, answer, text = _verify(bytes(certificate.pdf), tmp_path)
    assert code == 0 and answer["time"]["source"] == signing.TIME_CLOCK and answer["time"]["tsa"] == ""
    assert "no RFC 3161 timestamp" in answer["time"]["note"] and "by the portal's clock" in text
    assert "trusted time" not in text


def test_a_tsa_this_verifier_does_not_trust_gives_no_trusted_time(signed, tsa, tmp_path, settings):
    certificate = services.certificate_issue(campaign_id=signed.pk)
    settings.KILN_TSA_CA = ""  # a verifier elsewhere, without the TSA's root
    code, answer, text = _verify(bytes(certificate.pdf), tmp_path)
    assert code == 0, "the signature itself is sound"
    assert answer["time"]["source"] == signing.TIME_CLOCK and local.TSA_NAME in answer["time"]["tsa"]
    assert "no TSA root this verifier trusts" in answer["time"]["note"] and "trusted time" not in text


def test_the_old_certificate_verifies_offline_after_rotation(signed, tmp_path, site_key, settings):
    with local.local_tsa(tmp_path) as tsa:
        settings.KILN_TSA_URL, settings.KILN_TSA_CA = tsa.url, str(tsa.root_pem)
        certificate = services.certificate_issue(campaign_id=signed.pk)
    old_signer = keys.signing_identity_load().pdf_cert
    call_command("kiln_keys", "rotate", stdout=io.StringIO())
    assert keys.cert_sha256(keys.signing_identity_load().pdf_cert) != keys.cert_sha256(old_signer)
    assert len(list(site_key.glob("generations/*/pdf.key.pem"))) == 1, "the old private key is gone"
    # Offline: the TSA is down now; the verifier reads only the document and the site's public keys.
    code, answer, text = _verify(bytes(certificate.pdf), tmp_path)
    assert code == 0 and answer["status"] == "valid", answer
    assert answer["time"]["source"] == signing.TIME_TSA and "trusted time" in text, answer


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        (local.HTTP_ERROR, "answered HTTP 500"),
        (local.GARBAGE, "not an RFC 3161 timestamp"),
        (local.WRONG_NONCE, "answered another request (nonce"),
        (local.WRONG_IMPRINT, "stamped another digest"),
        (local.REFUSED, "refused the request (rejection: policy not accepted)"),
    ],
)
def test_a_tsa_that_misbehaves_fails_the_issuing_with_a_clear_error(signed, tsa, mode, said, users, client):
    tsa.mode = mode
    assert certificate_issue_task.apply(args=[signed.pk]).get() is None
    assert not Certificate.objects.exists(), "no certificate without the timestamp the site asked for"
    signed.refresh_from_db()
    assert signed.issue_error.startswith("TimestampError: the timestamp authority http://127.0.0.1:")
    assert said in signed.issue_error, signed.issue_error
    assert signed.audit.filter(action="certificate issue failed").exists()
    client.force_login(users["viewer"])
    page = client.get(reverse("certificates:campaign_detail", args=[signed.pk])).content.decode()
    assert 'id="issue-failed"' in page and "TimestampError" in page
    tsa.mode = local.GOOD  # the TSA recovers; the retry issues
    certificate = services.certificate_issue(campaign_id=signed.pk)
    assert certificate is not None and _token_time(bytes(certificate.pdf))


def test_a_tsa_that_is_down_or_untrusted_fails_the_issuing(signed, tmp_path, settings):
    with local.local_tsa(tmp_path) as gone:
        with_password = gone.url.replace("http://", "http://kiln:s3cret-pw@")
        settings.KILN_TSA_URL, settings.KILN_TSA_CA = with_password, str(gone.root_pem)
    assert certificate_issue_task.apply(args=[signed.pk]).get() is None
    signed.refresh_from_db()
    assert "cannot be reached" in signed.issue_error and gone.url in signed.issue_error
    assert "s3cret-pw" not in signed.issue_error, "the TSA's password is never shown"

    (tmp_path / "other").mkdir()
    with local.local_tsa(tmp_path / "other") as other:  # answers, but its root is not the one named
        settings.KILN_TSA_URL = other.url
        assert certificate_issue_task.apply(args=[signed.pk]).get() is None
    signed.refresh_from_db()
    assert "does not chain to a trusted root" in signed.issue_error, signed.issue_error
    settings.KILN_TSA_CA = ""
    assert certificate_issue_task.apply(args=[signed.pk]).get() is None
    signed.refresh_from_db()
    assert "KILN_TSA_CA is not" in signed.issue_error
    assert not Certificate.objects.exists()


def test_a_tsa_behind_basic_authentication_gets_the_urls_user(signed, tsa, settings):
    settings.KILN_TSA_URL = tsa.url.replace("http://", "http://kiln%40site:s3cret@")
    assert certificate_issue_task.apply(args=[signed.pk]).get() is not None
    assert tsa.authorizations and set(tsa.authorizations) == {"Basic " + base64.b64encode(b"kiln@site:s3cret").decode()}


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/tsa"])
def test_a_tsa_url_other_than_http_is_never_opened(signed, tsa, settings, url):
    settings.KILN_TSA_URL = url
    assert certificate_issue_task.apply(args=[signed.pk]).get() is None
    signed.refresh_from_db()
    assert "is not an http(s) URL" in signed.issue_error, signed.issue_error
    assert not Certificate.objects.exists()


def test_the_signature_carries_the_validation_data_in_its_own_revision(signed, tsa):
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pyhanko.sign.validation.dss import DocumentSecurityStore

    data = bytes(services.certificate_issue(campaign_id=signed.pk).pdf)
    reader = PdfFileReader(io.BytesIO(data))
    assert reader.xrefs.total_revisions == 2, "the signature and its DSS are one update"
    dss = DocumentSecurityStore.read_dss(reader)
    subjects = sorted(c.subject.human_friendly for c in dss.load_certs())
    assert any("Kiln site CA" in s for s in subjects) and any("Kiln certificate signing" in s for s in subjects)
    assert any(local.TSA_NAME in s for s in subjects) and any("Test TSA Root" in s for s in subjects)
    assert len(dss.crls) == 1


def _short_lived_identity(seconds: int) -> keys.SigningIdentity:
    """The site's identity with a signing certificate that expires in `seconds`."""
    identity = keys.signing_identity_load()
    ca_key = serialization.load_pem_private_key((keys.key_dir() / keys.CA_KEY).read_bytes(), password=None)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(identity.pdf_cert.subject).issuer_name(identity.pdf_cert.issuer)
        .public_key(identity.pdf_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(seconds=seconds))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, True, False, False, False, False, False, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )  # fmt: skip
    return keys.SigningIdentity(identity.seal_key, identity.pdf_key, cert, identity.chain, identity.generation)


def _blank_pdf() -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(200, 200)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_an_expired_signing_certificate_still_verifies_at_the_tsas_time(tsa):
    identity = _short_lived_identity(seconds=10)  # room to sign twice on a loaded machine
    timestamping = signing.timestamping_configured()
    crl = keys.site_crl(identity)
    assert timestamping is not None and crl is not None
    der = crl.public_bytes(serialization.Encoding.DER)
    stamped = signing.pdf_sign(_blank_pdf(), identity, reason="r", location="", timestamping=timestamping, crl=der)
    unstamped = signing.pdf_sign(_blank_pdf(), identity, reason="r", location="", crl=der)
    roots = (identity.chain[-1],)
    left = identity.pdf_cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    time.sleep(max(0.0, left.total_seconds()) + 1.5)  # the signing certificate has expired
    assert identity.pdf_cert.not_valid_after_utc < datetime.datetime.now(datetime.UTC)
    check = signing.pdf_signature_check(stamped, roots, timestamping.roots)
    assert check.status == signing.INTACT and check.time_source == signing.TIME_TSA, check
    assert signing.pdf_signature_check(unstamped, roots, timestamping.roots).status == signing.UNTRUSTED


def test_a_token_whose_imprint_was_changed_is_broken_not_a_trusted_time(tsa):
    """A forger who swaps the timestamp of one signature into another: the imprint no longer matches."""
    identity = keys.signing_identity_load()
    timestamping = signing.timestamping_configured()
    assert timestamping is not None

    def token(data: bytes) -> bytes:
        from pyhanko.pdf_utils.reader import PdfFileReader

        sig = PdfFileReader(io.BytesIO(data)).embedded_signatures[0]
        return bytes(sig.signer_info["unsigned_attrs"][0]["values"][0].dump())

    first = signing.pdf_sign(_blank_pdf(), identity, reason="a", location="", timestamping=timestamping)
    one = token(first)
    for _ in range(8):  # DER lengths vary by a byte with the numbers in them: find a token of one's size
        two = token(signing.pdf_sign(_blank_pdf(), identity, reason="b", location="", timestamping=timestamping))
        if len(two) == len(one):
            break
    assert len(one) == len(two) and one != two
    hole_one = first.index(one.hex().upper().encode())
    swapped = first[:hole_one] + two.hex().upper().encode() + first[hole_one + 2 * len(one) :]
    check = signing.pdf_signature_check(swapped, (identity.chain[-1],), timestamping.roots)
    assert check.status == signing.BROKEN and "RFC 3161 timestamp" in check.detail, check
    assert check.time_source == ""  # no trusted time on a broken signature


def test_an_unsigned_attribute_other_than_a_timestamp_is_refused():
    from asn1crypto import cms
    from pyhanko.pdf_utils.reader import PdfFileReader

    identity = keys.signing_identity_load()
    data = signing.pdf_sign(_blank_pdf(), identity, reason="r", location="")

    sig = PdfFileReader(io.BytesIO(data)).embedded_signatures[0]
    info = sig.signer_info.copy()
    now = cms.Time({"utc_time": datetime.datetime.now(datetime.UTC)})
    info["unsigned_attrs"] = cms.CMSAttributes([{"type": "signing_time", "values": [now]}])
    assert signing._signer_info_why_not(info).startswith("the signature carries unsigned attributes other than")
