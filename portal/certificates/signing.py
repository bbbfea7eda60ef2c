"""The PDF signature (PAdES baseline B, ECDSA P-256 via pyHanko) over the whole finished certificate.

The Ed25519 seal (seal.py) covers only the attached JSON payload; this signature covers every byte
of the document, so a changed page, an overlay, or bytes appended in an incremental update are
caught, and any PDF reader (poppler's pdfsig, Acrobat) shows who signed it.

A signature leaves one hole in what it hashes: the /Contents hex string that holds the signature
itself. pyHanko parses the CMS blob from it and ignores what follows (zero padding), and hex digits
decode the same in either case, so a byte flipped there would go unnoticed. The check below therefore
also requires that hole to be exactly the upper-case hex of the DER signature followed by zeros, as
pyHanko writes it: with that, no byte of a Kiln certificate can change without failing.
"""

from __future__ import annotations

import asyncio
import binascii
import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from asn1crypto import cms
from asn1crypto import keys as asn1_keys
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from portal.certificates.keys import SigningIdentity, cert_fingerprint, cert_sha256

FIELD_NAME = "KilnSeal"
# Room for the CMS blob in the PDF: an ECDSA signature plus a 2-3 certificate chain is ~2 KB; RSA-4096
# with a 3-level chain ~6 KB. 16 KB leaves room for a site's own PKI (pyHanko's default is 16 KB too).
SIGNATURE_BYTES = 16384

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
    signer = signers.SimpleSigner(
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
    return ""


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
    who = dict(signer_sha256=cert_sha256(signer), signer_subject=signer.subject.rfc4514_string(),
               signer_fingerprint=cert_fingerprint(signer))  # fmt: skip
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
