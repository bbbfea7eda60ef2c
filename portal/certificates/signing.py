"""The PDF signature (PAdES baseline B, ECDSA P-256 via pyHanko) over the whole finished certificate.

The Ed25519 seal (seal.py) covers only the attached JSON payload; this signature covers every byte
of the document, so a changed page, an overlay, or bytes appended in an incremental update are
caught, and any PDF reader (poppler's pdfsig, Acrobat) shows who signed it.

A signature leaves one hole in what it hashes: the /Contents hex string that holds the signature
itself. pyHanko parses the CMS blob from it and ignores what follows (zero padding), and hex digits
decode the same in either case, so a byte flipped there would go unnoticed. The check below therefore
also requires that hole to be exactly the upper-case hex of the DER signature followed by zeros, as
pyHanko writes it. The blob itself must be the one form the portal writes (_cms_why_not_canonical):
DER, one signer, no unsigned attributes, exactly the signer's certificate chain, no CRLs, and an ECDSA
signature with a low S (the portal normalises S when signing and says so in the sealed payload; (r, n - s)
verifies just as well, so verification.py refuses the other half; older certificates, signed before,
are held to their stored copy instead). With that, no byte of a Kiln certificate can change without failing.
"""

from __future__ import annotations

import asyncio
import binascii
import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from asn1crypto import cms, core
from asn1crypto import keys as asn1_keys
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

from portal.certificates.keys import SigningIdentity, cert_fingerprint, cert_sha256

FIELD_NAME = "KilnSeal"
# Room for the CMS blob in the PDF: an ECDSA signature plus a 2-3 certificate chain is ~2 KB; RSA-4096
# with a 3-level chain ~6 KB. 16 KB leaves room for a site's own PKI (pyHanko's default is 16 KB too).
SIGNATURE_BYTES = 16384

LOW_S = "low"  # payload["seal"]["ecdsa_s"] of certificates signed with a normalised S
INTACT = "intact"
BROKEN = "broken"
UNTRUSTED = "untrusted"
UNSIGNED = "unsigned"


@dataclass(frozen=True)
class SignatureCheck:
    """What the PDF signature says: INTACT (sound, by a trusted CA), UNTRUSTED (sound, unknown CA),
    BROKEN (the bytes or the signature changed), UNSIGNED (none)."""

    status: str
    detail: str
    signer_sha256: str = ""
    signer_subject: str = ""
    signer_fingerprint: str = ""
    # S in the upper half: the n - s twin of a low S. A certificate whose payload says the portal
    # wrote a low S (LOW_S) is tampered; one issued before that carries no such promise.
    high_s: bool = False


# Group orders of the curves a site's PKI may use (SEC 2, sections 2.4.2, 2.5.1, 2.6.1): S above half of
# the order is the malleable twin of a low S.
CURVE_ORDERS = {
    "secp256r1": 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,
    "secp384r1": int(
        "FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFC7634D81F4372DDF581A0DB248B0A77AECEC196ACCC52973", 16
    ),
    "secp521r1": int(
        "01FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFA51868783BF2F966B7FCC0148F709A5D03BB5C9B8899C47AEBB6FB71E91386409",
        16,
    ),
}


def low_s(signature: bytes, curve: str) -> bytes:
    """The ECDSA signature (DER) with S in the lower half of the group order, re-encoded as DER."""
    order = CURVE_ORDERS[curve]
    r, s = decode_dss_signature(signature)
    return encode_dss_signature(r, min(s, order - s))


def _asn1_cert(cert: x509.Certificate) -> asn1_x509.Certificate:
    return asn1_x509.Certificate.load(cert.public_bytes(serialization.Encoding.DER))


def pdf_sign(document: bytes, identity: SigningIdentity, *, reason: str, location: str) -> bytes:
    """The document with one PAdES signature covering all of it."""
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import fields, signers
    from pyhanko_certvalidator.registry import SimpleCertificateStore

    key_der = identity.pdf_key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    curve = identity.pdf_key.curve.name if isinstance(identity.pdf_key, ec.EllipticCurvePrivateKey) else ""

    class LowSSigner(signers.SimpleSigner):
        def sign_raw(self, data: bytes, digest_algorithm: str) -> bytes:
            raw = super().sign_raw(data, digest_algorithm)
            return low_s(raw, curve) if curve else raw

    signer = LowSSigner(
        signing_cert=_asn1_cert(identity.pdf_cert),
        signing_key=asn1_keys.PrivateKeyInfo.load(key_der),
        cert_registry=SimpleCertificateStore.from_certs([_asn1_cert(c) for c in identity.chain]),
    )
    meta = signers.PdfSignatureMetadata(
        field_name=FIELD_NAME,
        reason=reason,
        location=location or None,
        subfilter=fields.SigSeedSubFilter.PADES,
        md_algorithm="sha256",
    )
    writer = IncrementalPdfFileWriter(io.BytesIO(document), strict=False)
    out = io.BytesIO()
    pdf_signer = signers.PdfSigner(meta, signer=signer)
    _outside_any_event_loop(lambda: pdf_signer.sign_pdf(writer, output=out, bytes_reserved=SIGNATURE_BYTES))
    return out.getvalue()


def _outside_any_event_loop(call: Callable[[], object]) -> None:
    """pyHanko's sync API wraps asyncio.run(), which refuses to start in a thread whose event loop
    is running (an async caller, Playwright's sync API in tests): then run it in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        call()
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(call).result()


def _hole_is_canonical(data: bytes, byte_range: list[int], contents: bytes) -> str:
    """'' when the unsigned /Contents hole is exactly <HEX(DER)000...>, else why not."""
    _, len1, start2, _ = (int(v) for v in byte_range)
    hole = data[len1:start2]
    try:
        der = cms.ContentInfo.load(contents).dump()
    except ValueError as exc:
        return f"the signature blob is not CMS ({exc})"
    if contents != der + b"\x00" * (len(contents) - len(der)) or not contents.startswith(der):
        return "bytes after the signature blob are not zero padding"
    if hole != b"<" + binascii.hexlify(contents).upper() + b">":
        return "the signature's hex string was re-encoded"
    return _cms_why_not_canonical(der)


def _cms_why_not_canonical(der: bytes) -> str:
    """'' when the CMS blob is in the one form the portal writes, else what differs."""
    try:
        info = cms.ContentInfo.load(der, strict=True)
        if info.dump(force=True) != der:
            return "the signature blob is not DER (re-encoded)"
        if info["content_type"].native != "signed_data":
            return "the signature blob is not CMS SignedData"
        signed = info["content"]
        infos = signed["signer_infos"]
        if len(infos) != 1:
            return f"the signature blob holds {len(infos)} signers, not one"
        why = _signer_info_why_not(infos[0]) or _signed_data_why_not(signed, infos[0])
    except (ValueError, TypeError, KeyError) as exc:
        return f"the signature blob cannot be read ({type(exc).__name__}: {str(exc)[:200]})"
    return why


def _signer_info_why_not(info: cms.SignerInfo) -> str:
    if not isinstance(info["unsigned_attrs"], core.Void):
        return "the signature carries unsigned attributes"
    if info["sid"].name != "issuer_and_serial_number":
        return "the signer is not named by issuer and serial number"
    return ""


def _signed_data_why_not(signed: cms.SignedData, info: cms.SignerInfo) -> str:
    if not isinstance(signed["crls"], core.Void):
        return "the signature blob carries CRLs"
    if signed["version"].native != "v1" or len(signed["digest_algorithms"]) != 1:
        return "the SignedData header is not the one the portal writes"
    encapsulated = signed["encap_content_info"]
    if encapsulated["content_type"].native != "data" or not isinstance(encapsulated["content"], core.Void):
        return "the signature blob encapsulates content (a PDF signature is detached)"
    choices = list(signed["certificates"]) if not isinstance(signed["certificates"], core.Void) else []
    if any(c.name != "certificate" for c in choices):
        return "the signature blob carries attribute certificates"
    certs = [x509.load_der_x509_certificate(c.chosen.dump()) for c in choices]
    sid = info["sid"].chosen
    signer = [c for c in certs if c.serial_number == sid["serial_number"].native
              and c.issuer.public_bytes() == sid["issuer"].dump()]  # fmt: skip
    if len(signer) != 1 or not _is_chain(signer[0], certs):
        return "the signature blob does not carry exactly its signer's certificate chain up to a root"
    public = signer[0].public_key()
    if isinstance(public, ec.EllipticCurvePublicKey):
        signature = info["signature"].native
        r, s = decode_dss_signature(signature)
        if public.curve.name not in CURVE_ORDERS or encode_dss_signature(r, s) != signature:
            return "the ECDSA signature is not DER"
    return _as_written(signed, info, signer[0])


def _as_written(signed: cms.SignedData, info: cms.SignerInfo, signer: x509.Certificate) -> str:
    """'' when pyHanko, given the same signer, signed attributes and signature, writes the same
    SignerInfo and digest algorithm list (versions, identifiers, algorithm parameters)."""
    from pyhanko.sign import signers
    from pyhanko_certvalidator.registry import SimpleCertificateStore

    rebuild = signers.SimpleSigner(
        signing_cert=_asn1_cert(signer),
        signing_key=None,  # type: ignore[arg-type]  # only the SignerInfo is assembled, nothing signed
        cert_registry=SimpleCertificateStore(),
    )
    digest = info["digest_algorithm"]["algorithm"].native
    expected = rebuild.signer_info(digest, info["signed_attrs"], info["signature"].native)
    if expected.dump(force=True) != info.dump() or signed["digest_algorithms"][0].dump() != expected[
        "digest_algorithm"
    ].dump(force=True):
        return "the signer's record is not in the form the portal writes"
    return ""


def _is_chain(signer: x509.Certificate, certs: list[x509.Certificate]) -> bool:
    """`certs` is exactly the signer's chain up to a self-signed root, each issued by the next (no
    extra certificate, none twice, the root not left out): the only set the portal writes."""
    last = signer
    rest = [c for c in certs if c is not signer]
    while rest:
        issuers = [c for c in rest if c.subject == last.issuer and _issued_by(last, c)]
        if len(issuers) != 1 or last.subject == last.issuer:
            return False
        last = issuers[0]
        rest.remove(last)
    return last.subject == last.issuer and _issued_by(last, last)


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def pdf_signature_check(data: bytes, roots: tuple[x509.Certificate, ...]) -> SignatureCheck:
    """Validate the Kiln PDF signature offline against the trusted CA certificates."""
    from pyhanko.pdf_utils.misc import PdfError
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pyhanko.sign.validation import validate_pdf_signature
    from pyhanko.sign.validation.errors import SignatureValidationError
    from pyhanko_certvalidator import ValidationContext

    try:
        reader = PdfFileReader(io.BytesIO(data), strict=False)
        signatures = reader.embedded_signatures
    except (PdfError, ValueError, KeyError, TypeError, IndexError, OSError) as exc:
        return SignatureCheck(BROKEN, f"the PDF structure is damaged ({type(exc).__name__}: {str(exc)[:200]})")
    if not signatures:
        return SignatureCheck(UNSIGNED, "the PDF carries no document signature")
    if len(signatures) != 1 or signatures[0].field_name != FIELD_NAME:
        names = ", ".join(s.field_name for s in signatures)
        return SignatureCheck(BROKEN, f"expected one signature {FIELD_NAME!r}, found: {names}")
    signature = signatures[0]
    why = _hole_is_canonical(data, list(signature.byte_range), signature.pkcs7_content)
    if why:
        return SignatureCheck(BROKEN, f"the signature field was altered: {why}")
    context = ValidationContext(trust_roots=[_asn1_cert(c) for c in roots], allow_fetching=False)
    try:
        status = validate_pdf_signature(signature, context)
    except (SignatureValidationError, PdfError, ValueError) as exc:
        return SignatureCheck(BROKEN, f"the document signature does not validate ({str(exc)[:200]})")
    signer = x509.load_der_x509_certificate(status.signing_cert.dump())
    public, raw = signer.public_key(), signature.signer_info["signature"].native
    upper = isinstance(public, ec.EllipticCurvePublicKey) and low_s(raw, public.curve.name) != raw
    who: dict[str, Any] = dict(signer_sha256=cert_sha256(signer), signer_subject=signer.subject.rfc4514_string(),
                               signer_fingerprint=cert_fingerprint(signer), high_s=upper)  # fmt: skip
    if status.coverage is None or status.coverage.name != "ENTIRE_FILE":
        return SignatureCheck(BROKEN, "bytes were added or changed after the document was signed", **who)
    if not status.intact:
        return SignatureCheck(BROKEN, "the signed bytes of the PDF changed after signing (digest mismatch)", **who)
    if not status.valid:
        return SignatureCheck(BROKEN, "the document signature does not match its digest and certificate", **who)
    if not status.trusted:
        return SignatureCheck(
            UNTRUSTED, f"the PDF is signed by {who['signer_subject']}, whose certificate no trusted CA issued", **who
        )
    return SignatureCheck(INTACT, f"every byte is covered by a valid signature of {who['signer_subject']}", **who)
