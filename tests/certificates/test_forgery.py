"""What a forger or a careless hand does to a certificate PDF, and what kiln_verify answers:
0 valid, 1 tampered, 2 unknown key, 3 not a certificate, 4 revoked."""

from __future__ import annotations

import io
import json
import re
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from portal.certificates import keys, pdf, seal, services, signing, verification


def _verify(data: bytes, tmp_path: Path) -> tuple[int, dict]:
    path = tmp_path / "candidate.pdf"
    path.write_bytes(data)
    out = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("kiln_verify", str(path), "--json", stdout=out)
    return int(exited.value.code), json.loads(out.getvalue())


def _overlay(text: str) -> object:
    import weasyprint
    from pypdf import PdfReader

    html = f'<p style="font-size:30pt;background:#1a7f37;color:#fff;margin-top:40mm">{text}</p>'
    return PdfReader(io.BytesIO(weasyprint.HTML(string=html).write_pdf())).pages[0]


def _pypdf_overlay(original: bytes, text: str, *, incremental: bool) -> bytes:
    """Stamp text on page 1 with pypdf, keeping every attachment: a visible forgery."""
    from pypdf import PdfReader, PdfWriter

    reader = PdfReader(io.BytesIO(original))
    writer = PdfWriter(reader, incremental=True) if incremental else PdfWriter(clone_from=reader)
    writer.pages[0].merge_page(_overlay(text))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_the_issued_pdf_is_valid(issued, tmp_path):
    code, answer = _verify(bytes(issued.pdf), tmp_path)
    assert (code, answer["status"], answer["verdict"]) == (0, "valid", "PASS WITH WAIVERS")


@pytest.mark.parametrize("incremental", [False, True], ids=["rewritten", "incremental-update"])
@pytest.mark.parametrize("text", ["PASS", "Cluster other-cluster"])
def test_an_overlay_on_page_one_is_tampered(issued, tmp_path, incremental, text):
    forged = _pypdf_overlay(bytes(issued.pdf), text, incremental=incremental)
    assert pdf.pdf_extract(forged)[0] == issued.payload.encode(), "the forger kept the sealed payload"
    code, answer = _verify(forged, tmp_path)
    assert (code, answer["status"]) == (1, "tampered"), answer["detail"]
    assert "PDF signature" in answer["detail"]


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_one_flipped_byte_anywhere_is_tampered(issued, tmp_path, fraction):
    data = bytearray(bytes(issued.pdf))
    data[int(len(data) * fraction)] ^= 0xFF
    code, answer = _verify(bytes(data), tmp_path)
    assert (code, answer["status"]) == (1, "tampered"), answer["detail"]


def test_a_byte_changed_inside_the_signature_hole_is_tampered(issued, tmp_path):
    """The /Contents hex string is the one region the signature's digest skips: pyHanko ignores its
    zero padding and hex case, so Kiln checks that region's exact form."""
    data = bytes(issued.pdf)
    start = data.rindex(b"/Contents <") + len(b"/Contents <")
    end = data.index(b">", start)
    padding = data.rindex(b"00", start, end)  # inside the zero padding after the DER blob
    for replacement in (b"1", b"0".lower()):
        changed = data[:padding] + replacement + data[padding + 1 :]
        if changed == data:
            continue
        assert _verify(changed, tmp_path)[0] == 1
    letter = re.search(rb"[A-F]", data[start:end])
    assert letter, "upper-case hex digits in the signature"
    at = start + letter.start()
    lower = data[:at] + data[at : at + 1].lower() + data[at + 1 :]  # decodes to the same bytes
    code, answer = _verify(lower, tmp_path)
    assert code == 1 and "re-encoded" in answer["detail"]


def test_appended_bytes_are_tampered(issued, tmp_path):
    assert _verify(bytes(issued.pdf) + b"\n% appended\n", tmp_path)[0] == 1


def test_a_stripped_signature_is_tampered(issued, tmp_path):
    payload_bytes, seal_data = pdf.pdf_extract(bytes(issued.pdf))
    unsigned = pdf.pdf_render(
        payload=json.loads(payload_bytes), payload_bytes=payload_bytes, seal_data=seal_data, charts=[], charts_note=""
    )
    code, answer = _verify(unsigned, tmp_path)
    assert code == 1 and "no document signature" in answer["detail"]


def test_pages_that_contradict_the_payload_are_tampered_even_when_signed_by_the_site(issued, tmp_path):
    """The site's own PDF key signed a document whose cover says PASS over a payload that says
    PASS WITH WAIVERS (a rendering bug, or a stolen PDF key): the headline check catches it."""
    payload_bytes, seal_data = pdf.pdf_extract(bytes(issued.pdf))
    shown = {**json.loads(payload_bytes), "verdict": "PASS", "waivers": []}
    document = pdf.pdf_render(
        payload=shown, payload_bytes=payload_bytes, seal_data=seal_data, charts=[], charts_note=""
    )
    signed = signing.pdf_sign(document, keys.signing_identity_load(), reason="x", location="")
    code, answer = _verify(signed, tmp_path)
    assert code == 1 and "first page does not state the sealed verdict" in answer["detail"]


def test_a_pdf_signed_by_another_ca_over_the_real_payload_is_tampered(issued, settings, tmp_path):
    """A forger with their own CA re-signs edited pages around the genuine sealed payload: the
    payload names the site's PDF certificate, so the swap shows."""
    original = keys.key_dir()
    settings.KILN_KEY_DIR = str(tmp_path / "forger")
    forger = keys.keyring_init(site="Forger")
    settings.KILN_KEY_DIR = str(original)
    payload_bytes, seal_data = pdf.pdf_extract(bytes(issued.pdf))
    shown = {**json.loads(payload_bytes), "verdict": "PASS", "waivers": []}
    document = pdf.pdf_render(
        payload=shown, payload_bytes=payload_bytes, seal_data=seal_data, charts=[], charts_note=""
    )
    code, answer = _verify(signing.pdf_sign(document, forger, reason="x", location=""), tmp_path)
    assert code == 1 and "not the one the payload names" in answer["detail"]


def test_a_revoked_certificate_exits_4_with_the_reason(issued, users, tmp_path):
    services.certificate_revoke(certificate=issued, reason="wrong plan version", user=users["customer"])
    code, answer = _verify(bytes(issued.pdf), tmp_path)
    assert (code, answer["status"]) == (4, "revoked")
    assert "wrong plan version" in answer["detail"] and users["customer"].username in answer["detail"]


def test_files_that_are_not_certificates_exit_3(issued, tmp_path):
    import weasyprint

    assert _verify(b"", tmp_path)[0] == 3
    assert _verify(b"\x00\xff" * 1000, tmp_path)[0] == 3
    assert _verify(weasyprint.HTML(string="<p>hello</p>").write_pdf(), tmp_path)[0] == 3


def test_the_exit_codes_are_the_documented_ones():
    assert verification.EXIT_CODES == {
        seal.VALID: 0, seal.TAMPERED: 1, seal.UNKNOWN_KEY: 2, seal.NOT_A_CERTIFICATE: 3, seal.REVOKED: 4,
    }  # fmt: skip


def test_pdfsig_reports_the_whole_document_signed_and_valid(issued, tmp_path):
    path = tmp_path / "cert.pdf"
    path.write_bytes(bytes(issued.pdf))
    out = subprocess.run(["pdfsig", str(path)], capture_output=True, text=True, check=False).stdout
    assert "Total document signed" in out and "Signature is Valid" in out, out
    assert "Kiln certificate signing" in out
    broken = bytearray(bytes(issued.pdf))
    broken[len(broken) // 2] ^= 0xFF
    path.write_bytes(bytes(broken))
    out = subprocess.run(["pdfsig", str(path)], capture_output=True, text=True, check=False).stdout
    assert "Signature is Valid" not in out


def test_the_verifier_runs_in_a_limited_child_and_survives_its_death(issued, tmp_path, settings):
    """A hostile PDF may exhaust memory or loop in the parsers: the child dies, the answer stands."""
    settings.KILN_VERIFY_MEMORY_MB = 64  # too little for Python and the parsers
    code, answer = _verify(bytes(issued.pdf), tmp_path)
    assert code == 1 and "could not be checked within limits" in answer["detail"], answer
    code, answer = _verify(b"%PDF-1.7 not much", tmp_path)
    assert code == 3
    settings.KILN_VERIFY_MEMORY_MB = 2048
    settings.KILN_VERIFY_WALL_S = 0.01
    code, answer = _verify(bytes(issued.pdf), tmp_path)
    assert code == 1 and "no answer after 0.01 s" in answer["detail"]


def test_a_pdf_with_a_nested_or_broken_structure_gets_an_answer_not_a_crash(issued, tmp_path):
    nested = b"%PDF-1.7\n1 0 obj\n" + b"[" * 200000 + b"]" * 200000 + b"\nendobj\n/T (KilnSeal)\n%%EOF"
    assert _verify(nested, tmp_path)[0] == 1
    # Cut in half: the signature field and attachment names are lost, Kiln's producer line (object 1) is not.
    assert _verify(bytes(issued.pdf)[: len(bytes(issued.pdf)) // 2], tmp_path)[0] == 1
    assert _verify(bytes(issued.pdf)[:-100], tmp_path)[0] == 1  # cut just short: still recognisably Kiln
    assert _verify(b"%PDF-1.7\n" + b"\x00\xff" * 50000, tmp_path)[0] == 3


# --- one canonical signature: forgeries that keep every signature "valid" -----------------------


def _cms_edit(data: bytes, edit) -> bytes:
    """The certificate with its CMS blob changed by `edit` (on the parsed SignedData) and written
    back, as DER, upper-case hex and zero padding, into the same /Contents hole: no key needed."""
    from asn1crypto import cms

    start = data.rindex(b"/Contents <") + len(b"/Contents <")
    end = data.index(b">", start)
    info = cms.ContentInfo.load(cms.ContentInfo.load(bytes.fromhex(data[start:end].decode())).dump())
    edit(info["content"])
    new = edit.raw(info) if hasattr(edit, "raw") else info.dump(force=True)
    hexed = new.hex().upper().encode()
    assert len(hexed) <= end - start
    return data[:start] + hexed + b"0" * (end - start - len(hexed)) + data[end:]


def _s_twin(signed) -> None:
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

    info = signed["signer_infos"][0]
    r, s = decode_dss_signature(info["signature"].native)
    info["signature"] = encode_dss_signature(r, signing.CURVE_ORDERS["secp256r1"] - s)


def _unsigned_attribute(signed) -> None:
    from asn1crypto import cms, core

    attribute = cms.CMSAttribute({"type": "1.3.6.1.4.1.99999.1", "values": [core.OctetString(b"\xa5" * 520)]})
    signed["signer_infos"][0]["unsigned_attrs"] = cms.CMSAttributes([attribute])


def _pdfsig_valid(data: bytes, tmp_path: Path) -> bool:
    path = tmp_path / "pdfsig.pdf"
    path.write_bytes(data)
    out = subprocess.run(["pdfsig", str(path)], capture_output=True, text=True, check=False).stdout
    return "Total document signed" in out and "Signature is Valid" in out


def test_the_portal_signs_with_a_low_s(issued):
    from asn1crypto import cms
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    data = bytes(issued.pdf)
    start = data.rindex(b"/Contents <") + len(b"/Contents <")
    blob = cms.ContentInfo.load(bytes.fromhex(data[start : data.index(b">", start)].decode()))
    _, s = decode_dss_signature(blob["content"]["signer_infos"][0]["signature"].native)
    assert s <= signing.CURVE_ORDERS["secp256r1"] // 2


@pytest.mark.parametrize(
    ("forge", "why"),
    [(_s_twin, "high S"), (_unsigned_attribute, "unsigned attributes")],
    ids=["n-minus-s", "unsigned-attribute-520-bytes"],
)
def test_a_twin_that_every_signature_check_accepts_is_tampered(issued, tmp_path, forge, why):
    """(r, n - s) and an unsigned attribute leave the signature mathematically valid (pdfsig says so):
    the verifier accepts only the one form the portal writes."""
    forged = _cms_edit(bytes(issued.pdf), forge)
    assert forged != bytes(issued.pdf) and _pdfsig_valid(forged, tmp_path), "the forgery is a real one"
    code, answer = _verify(forged, tmp_path)
    assert (code, answer["status"]) == (1, "tampered"), answer["detail"]
    assert why in answer["detail"]


def test_an_extra_certificate_or_crl_in_the_signature_is_tampered(issued, settings, tmp_path):
    from asn1crypto import cms, crl
    from asn1crypto import x509 as asn1_x509
    from cryptography.hazmat.primitives import serialization

    original = keys.key_dir()
    settings.KILN_KEY_DIR = str(tmp_path / "other")
    other = keys.keyring_init(site="Other")
    settings.KILN_KEY_DIR = str(original)
    extra = asn1_x509.Certificate.load(other.chain[0].public_bytes(serialization.Encoding.DER))

    def add_certificate(signed) -> None:
        signed["certificates"] = [*signed["certificates"], cms.CertificateChoices(name="certificate", value=extra)]

    code, answer = _verify(_cms_edit(bytes(issued.pdf), add_certificate), tmp_path)
    assert code == 1 and "certificate chain" in answer["detail"], answer["detail"]

    def add_crl(signed) -> None:
        revocations = crl.CertificateList.load(_empty_crl(other))
        signed["crls"] = cms.RevocationInfoChoices([cms.RevocationInfoChoice(name="crl", value=revocations)])

    code, answer = _verify(_cms_edit(bytes(issued.pdf), add_crl), tmp_path)
    assert code == 1 and "CRLs" in answer["detail"], answer["detail"]


def _empty_crl(identity: keys.SigningIdentity) -> bytes:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    now = datetime.datetime.now(datetime.UTC)
    builder = x509.CertificateRevocationListBuilder().issuer_name(identity.pdf_cert.subject).last_update(now)
    built = builder.next_update(now + datetime.timedelta(days=1)).sign(identity.pdf_key, hashes.SHA256())
    return built.public_bytes(serialization.Encoding.DER)


def test_a_ber_re_encoding_of_the_signature_is_tampered(issued, tmp_path):
    """The same values, one length written in long form (BER allows it, DER does not)."""

    def keep(signed) -> None:
        pass

    def raw(info) -> bytes:
        der = info.dump()
        assert der[:2] == b"\x30\x82"  # SEQUENCE, two length bytes
        return b"\x30\x83\x00" + der[2:]

    keep.raw = raw
    code, answer = _verify(_cms_edit(bytes(issued.pdf), keep), tmp_path)
    assert code == 1, answer["detail"]


def test_a_copy_re_signed_by_the_site_itself_is_not_the_issued_certificate(issued, tmp_path):
    """Same payload, same pages, a sound signature by the site's own key (a new random ECDSA nonce):
    every signature check passes, but the portal holds the one file it issued, and this is not it."""
    payload_bytes, seal_data = pdf.pdf_extract(bytes(issued.pdf))
    document = pdf.pdf_render(
        payload=json.loads(payload_bytes), payload_bytes=payload_bytes, seal_data=seal_data, charts=[], charts_note=""
    )
    resigned = signing.pdf_sign(document, keys.signing_identity_load(), reason="x", location="")
    code, answer = _verify(resigned, tmp_path)
    assert (code, answer["status"]) == (1, "tampered"), answer["detail"]
    assert "byte for byte" in answer["detail"]


def test_a_truncated_certificate_is_tampered_and_a_missing_file_is_a_usage_error(issued, tmp_path, capsys):
    data = bytes(issued.pdf)
    for cut in (len(data) // 10, len(data) // 2):
        code, answer = _verify(data[:cut], tmp_path)
        assert (code, answer["status"]) == (1, "tampered"), (cut, answer["detail"])
    with pytest.raises(SystemExit) as exited:
        call_command("kiln_verify", str(tmp_path / "absent.pdf"), "--json", stdout=io.StringIO())
    assert exited.value.code == 64
    err = capsys.readouterr().err
    assert "cannot read" in err and "absent.pdf" in err
