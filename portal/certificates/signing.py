"""The PDF signature (PAdES baseline B, ECDSA P-256 via pyHanko) over the whole finished certificate.

The Ed25519 seal (seal.py) covers only the attached JSON payload; this signature covers every byte
of the document, so a changed page, an overlay, or bytes appended in an incremental update are
caught, and any PDF reader (poppler's pdfsig, Acrobat) shows who signed it.

A signature leaves one hole in what it hashes: the /Contents hex string that holds the signature
itself. pyHanko parses the CMS blob from it and ignores what follows (zero padding), and hex digits
decode the same in either case, so a byte flipped there would go unnoticed. The check below therefore
also requires that hole to be exactly the upper-case hex of the DER signature followed by zeros, as
pyHanko writes it. The blob itself must be the one form the portal writes (_cms_why_not_canonical):
DER, one signer, no unsigned attribute but an RFC 3161 timestamp, exactly the signer's certificate chain,
no CRLs, and an ECDSA signature with a low S (the portal normalises S when signing and says so in the
sealed payload; (r, n - s) verifies just as well, so verification.py refuses the other half; older
certificates, signed before, are held to their stored copy instead). With that, no byte of a Kiln
certificate can change without failing.

Trusted time and long-term validity. With a timestamp authority configured (KILN_TSA_URL), the signature
carries an RFC 3161 token over its value (the unsigned attribute id-aa-signatureTimeStampToken): its
time comes from the TSA, not the portal's clock. Every signature also carries, in the same signed
revision (so the whole file stays covered), a document security store (DSS) with the certificates of
the signer, the site CA and the TSA, and a CRL the site CA issues at signing time: PAdES B-LT when
timestamped. The verifier then judges the signing certificate at the TSA's time with that embedded
data, so the signature still verifies offline after the certificate is rotated away or expires.
"""

from __future__ import annotations

import asyncio
import binascii
import io
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asn1crypto import cms, core
from asn1crypto import keys as asn1_keys
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

from portal.certificates.keys import SigningIdentity, cert_fingerprint, cert_sha256

if TYPE_CHECKING:
    from asn1crypto import tsp

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
    # When it was signed (ISO 8601, UTC) and who says so: TIME_TSA (an RFC 3161 timestamp by a TSA
    # this verifier trusts, named in `tsa`) or TIME_CLOCK (the portal's own clock, as it claimed).
    time: str = ""
    time_source: str = ""
    tsa: str = ""
    time_note: str = ""


TIME_TSA = "timestamp authority"
TIME_CLOCK = "portal clock"
TSA_TOKEN = "signature_time_stamp_token"  # asn1crypto's name of id-aa-signatureTimeStampToken


class TimestampError(RuntimeError):
    """The timestamp authority gave no usable timestamp: the message says which TSA, and why."""


@dataclass(frozen=True)
class Timestamping:
    """Where to get the RFC 3161 timestamp, and the roots its TSA's certificate must chain to."""

    url: str
    roots: tuple[x509.Certificate, ...]
    timeout_s: float

    @property
    def shown(self) -> str:
        """The URL as errors show it: without a user and password (a TSA with basic auth)."""
        return _without_credentials(self.url)


def _without_credentials(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=host))


def timestamping_configured() -> Timestamping | None:
    """The settings' TSA (KILN_TSA_URL, KILN_TSA_CA, KILN_TSA_TIMEOUT_S), or None when none is set."""
    from django.conf import settings

    from portal.certificates.keys import KeyringError, tsa_roots

    url = str(settings.KILN_TSA_URL or "")
    if not url:
        return None
    try:
        roots = tsa_roots()
    except KeyringError as exc:
        raise TimestampError(f"KILN_TSA_CA cannot be read: {exc}") from None
    if not roots:
        raise TimestampError(
            f"KILN_TSA_URL is set ({_without_credentials(url)}) but KILN_TSA_CA is not: name the PEM file of "
            "the TSA's root certificate, without which its time cannot be trusted"
        )
    return Timestamping(url, roots, float(settings.KILN_TSA_TIMEOUT_S))


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


def _tsa_stamper(timestamping: Timestamping) -> Any:
    """A pyHanko TimeStamper that says plainly what went wrong: no answer, an HTTP error, not an
    RFC 3161 reply, a refusal, a reply for another request (nonce) or another digest (imprint)."""
    # The standard library's HTTP client: the production lock has no requests.
    import base64
    import urllib.error
    import urllib.parse
    import urllib.request

    from pyhanko.sign.timestamps import TimeStamper

    url, shown, timeout = timestamping.url, timestamping.shown, timestamping.timeout_s

    def post(request: tsp.TimeStampReq) -> bytes:
        headers = {"Content-Type": "application/timestamp-query", "Accept": "application/timestamp-reply"}
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise TimestampError(f"the timestamp authority {shown} is not an http(s) URL")
        if parts.username is not None:  # a TSA behind HTTP basic authentication, its user in the URL
            user = urllib.parse.unquote(parts.username) + ":" + urllib.parse.unquote(parts.password or "")
            headers["Authorization"] = "Basic " + base64.b64encode(user.encode()).decode("ascii")
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host  # an IPv6 address
        target = urllib.parse.urlunsplit(parts._replace(netloc=host + (f":{parts.port}" if parts.port else "")))
        asked = urllib.request.Request(target, data=request.dump(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(asked, timeout=timeout) as answer:
                kind = answer.headers.get("Content-Type", "").split(";")[0].strip()
                body = answer.read()
        except urllib.error.HTTPError as exc:
            raise TimestampError(f"the timestamp authority {shown} answered HTTP {exc.code}") from None
        except TimeoutError:
            raise TimestampError(f"the timestamp authority {shown} did not answer within {timeout:g} s") from None
        except (urllib.error.URLError, OSError) as exc:
            if isinstance(getattr(exc, "reason", None), TimeoutError):
                raise TimestampError(f"the timestamp authority {shown} did not answer within {timeout:g} s") from None
            raise TimestampError(f"the timestamp authority {shown} cannot be reached: {exc}") from None
        if kind != "application/timestamp-reply":
            raise TimestampError(f"the timestamp authority {shown} answered {kind or 'no content type'}, "
                                 "not an RFC 3161 reply (application/timestamp-reply)")  # fmt: skip
        return bytes(body)

    class KilnTimeStamper(TimeStamper):  # type: ignore[misc]
        async def async_request_tsa_response(self, req: tsp.TimeStampReq) -> Any:
            return _Reply.load(await asyncio.to_thread(post, req))

        async def async_timestamp(self, message_digest: bytes, md_algorithm: str) -> cms.ContentInfo:
            nonce, request = self.request_cms(message_digest, md_algorithm)
            reply = await self.async_request_tsa_response(request)
            return _token_checked(shown, reply, nonce, message_digest, md_algorithm)

    return KilnTimeStamper()


def _reply_class() -> type:
    from asn1crypto import tsp

    class Reply(core.Sequence):  # type: ignore[misc]
        """TimeStampResp with the token optional, as RFC 3161 has it: a refusal carries a status alone
        (asn1crypto's own class requires the token, and would hide the TSA's reason)."""

        _fields = [("status", tsp.PKIStatusInfo), ("time_stamp_token", cms.ContentInfo, {"optional": True})]

    return Reply


_Reply: Any = _reply_class()


def _token_checked(url: str, reply: Any, nonce: int, digest: bytes, md_algorithm: str) -> cms.ContentInfo:
    """The reply's token if it answers this request, else TimestampError saying how it does not."""
    try:
        status = reply["status"]["status"].native
        if status not in ("granted", "granted_with_mods"):
            said = "; ".join(reply["status"]["status_string"].native or []) or "no reason given"
            raise TimestampError(f"the timestamp authority {url} refused the request ({status}: {said})")
        token = reply["time_stamp_token"]
        info = token["content"]["encap_content_info"]["content"].parsed
        got_nonce = info["nonce"].native
        imprint = info["message_imprint"]
        algorithm, hashed = imprint["hash_algorithm"]["algorithm"].native, imprint["hashed_message"].native
    except TimestampError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise TimestampError(f"the timestamp authority {url} answered something that is not an RFC 3161 "
                             f"timestamp ({type(exc).__name__}: {str(exc)[:200]})") from None  # fmt: skip
    if got_nonce != nonce:
        raise TimestampError(
            f"the timestamp authority {url} answered another request (nonce {got_nonce!r}, sent {nonce}): "
            "a replayed or misrouted reply"
        )
    if algorithm != md_algorithm or hashed != digest:
        raise TimestampError(
            f"the timestamp authority {url} stamped another digest ({algorithm} {bytes(hashed or b'').hex()[:16]}...) "
            "than the signature's"
        )
    return token


def _validation_context(identity: SigningIdentity, timestamping: Timestamping | None, crl: bytes | None) -> Any:
    """What pyHanko embeds in the DSS: the chains of the signer and the TSA, and the site CA's CRL."""
    from pyhanko_certvalidator import ValidationContext

    roots = [_asn1_cert(c) for c in identity.chain if c.subject == c.issuer]
    roots += [_asn1_cert(c) for c in (timestamping.roots if timestamping else ())]
    # Fetching only with a TSA: its chain's revocation data (CRL or OCSP) is fetched from the URLs its
    # certificates name; the site's own signature needs nothing from the network.
    return ValidationContext(trust_roots=roots, crls=[crl] if crl else [], allow_fetching=timestamping is not None)


def pdf_sign(
    document: bytes,
    identity: SigningIdentity,
    *,
    reason: str,
    location: str,
    timestamping: Timestamping | None = None,
    crl: bytes | None = None,
) -> bytes:
    """The document with one PAdES signature covering all of it, its validation data (DSS) in the
    same revision; with `timestamping`, an RFC 3161 timestamp from that TSA, or TimestampError.
    `crl`: the site CA's CRL (DER) to embed (keys.site_crl)."""
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import fields, signers
    from pyhanko.sign.signers.pdf_signer import DSSContentSettings, SigDSSPlacementPreference
    from pyhanko_certvalidator.errors import PathBuildingError, PathValidationError, ValidationError
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
        embed_validation_info=True,
        validation_context=_validation_context(identity, timestamping, crl),
        # In the signature's own revision (VRI needs the signature, so none): the byte range then
        # still covers the whole file, as the verifier requires.
        dss_settings=DSSContentSettings(placement=SigDSSPlacementPreference.TOGETHER_WITH_SIGNATURE, include_vri=False),
    )
    logging.getLogger("pyhanko.sign.signers.pdf_signer").addFilter(_no_fetching_warning)
    writer = IncrementalPdfFileWriter(io.BytesIO(document), strict=False)
    out = io.BytesIO()
    stamper = _tsa_stamper(timestamping) if timestamping else None
    pdf_signer = signers.PdfSigner(meta, signer=signer, timestamper=stamper)
    try:
        _outside_any_event_loop(lambda: pdf_signer.sign_pdf(writer, output=out, bytes_reserved=SIGNATURE_BYTES))
    except (PathBuildingError, PathValidationError, ValidationError) as exc:
        if timestamping is None:
            raise
        raise TimestampError(
            f"the timestamp authority {timestamping.shown} or this site's signing certificate does not chain to a "
            f"trusted root (KILN_TSA_CA for the TSA): {str(exc)[:300]}"
        ) from None
    signed = out.getvalue()
    if timestamping is not None:
        _timestamp_required(signed, identity, timestamping)
    return signed


def _no_fetching_warning(record: logging.LogRecord) -> bool:
    """Drop pyHanko's warning that nothing is fetched while validation data is embedded: offline is
    what the site's own chain wants (its CA's CRL is supplied); with a TSA, fetching is on."""
    return "fetching is not allowed" not in record.getMessage()


def _timestamp_required(signed: bytes, identity: SigningIdentity, timestamping: Timestamping) -> None:
    """The signed document verifies with a timestamp the TSA roots vouch for: no certificate leaves
    with a broken or untrusted timestamp while one is configured."""
    roots = tuple(c for c in identity.chain if c.subject == c.issuer)
    check = pdf_signature_check(signed, roots, timestamping.roots)
    if check.status != INTACT or check.time_source != TIME_TSA:
        why = check.detail if check.status != INTACT else check.time_note
        raise TimestampError(f"the document signed with the timestamp of {timestamping.shown} does not verify: {why}")


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
    unsigned = info["unsigned_attrs"]
    if not isinstance(unsigned, core.Void) and (
        len(unsigned) != 1 or unsigned[0]["type"].native != TSA_TOKEN or len(unsigned[0]["values"]) != 1
    ):
        return "the signature carries unsigned attributes other than one RFC 3161 timestamp"
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
    if not isinstance(info["unsigned_attrs"], core.Void):  # the one timestamp _signer_info_why_not allows
        expected["unsigned_attrs"] = info["unsigned_attrs"]
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


def _context(roots: tuple[x509.Certificate, ...], reader: Any = None, moment: Any = None) -> Any:
    """An offline validation context: these roots, and with `reader` the document's DSS (its
    certificates and CRLs), judged at `moment` (None: now)."""
    from pyhanko.pdf_utils.misc import PdfError
    from pyhanko.sign.validation.dss import DocumentSecurityStore, NoDSSFoundError
    from pyhanko_certvalidator import ValidationContext

    kwargs: dict[str, Any] = {"trust_roots": [_asn1_cert(c) for c in roots], "allow_fetching": False}
    if moment is not None:
        kwargs.update(moment=moment, best_signature_time=moment)
    if reader is None:
        return ValidationContext(**kwargs)
    try:
        return DocumentSecurityStore.read_dss(reader).as_validation_context(kwargs)
    except NoDSSFoundError:
        return ValidationContext(**kwargs)
    except (PdfError, KeyError, TypeError, AttributeError) as exc:  # hostile bytes: a damaged DSS
        raise ValueError(f"its validation data (DSS) cannot be read: {type(exc).__name__}") from None


def _timing(status: Any) -> tuple[str, dict[str, Any]]:
    """('' or why the timestamp is broken, the SignatureCheck's time fields) from pyHanko's status."""
    token = status.timestamp_validity
    claimed = status.signer_reported_dt
    clock = {"time": claimed.isoformat() if claimed else "", "time_source": TIME_CLOCK}
    if token is None:
        return "", {**clock, "time_note": "no RFC 3161 timestamp"}
    tsa = token.signing_cert.subject.human_friendly if token.signing_cert is not None else "an unnamed TSA"
    if not (token.intact and token.valid):
        return f"the RFC 3161 timestamp of {tsa} does not match the signature (imprint or TSA signature wrong)", {}
    at = token.timestamp.isoformat()
    if not token.trusted:
        note = (
            f"a timestamp by {tsa} says {at}, but no TSA root this verifier trusts (KILN_TSA_CA) issued its certificate"
        )
        return "", {**clock, "tsa": tsa, "time_note": note}
    return "", {"time": at, "time_source": TIME_TSA, "tsa": tsa, "time_note": f"RFC 3161 timestamp by {tsa}"}


def pdf_signature_check(
    data: bytes, roots: tuple[x509.Certificate, ...], tsa_roots: tuple[x509.Certificate, ...] = ()
) -> SignatureCheck:
    """Validate the Kiln PDF signature offline against the trusted CA certificates; a timestamp
    counts as trusted time when its TSA chains to `tsa_roots`, and then the signing certificate is
    judged at that time with the document's own validation data (DSS)."""
    from pyhanko.pdf_utils.misc import PdfError
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pyhanko.sign.validation import validate_pdf_signature
    from pyhanko.sign.validation.errors import SignatureValidationError

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
    try:
        status = validate_pdf_signature(signature, _context(roots, reader), _context(tsa_roots))
        broken, timing = _timing(status)
        if not broken and timing["time_source"] == TIME_TSA and status.timestamp_validity is not None:
            # Long-term validation: the signing certificate as it stood at the TSA's time, with the
            # CRL embedded then, so that rotation or expiry since changes nothing.
            moment = status.timestamp_validity.timestamp
            status = validate_pdf_signature(signature, _context(roots, reader, moment), _context(tsa_roots))
    except (SignatureValidationError, PdfError, ValueError) as exc:
        return SignatureCheck(BROKEN, f"the document signature does not validate ({str(exc)[:200]})")
    if broken:
        return SignatureCheck(BROKEN, broken)
    signer = x509.load_der_x509_certificate(status.signing_cert.dump())
    public, raw = signer.public_key(), signature.signer_info["signature"].native
    upper = isinstance(public, ec.EllipticCurvePublicKey) and low_s(raw, public.curve.name) != raw
    who: dict[str, Any] = dict(signer_sha256=cert_sha256(signer), signer_subject=signer.subject.rfc4514_string(),
                               signer_fingerprint=cert_fingerprint(signer), high_s=upper, **timing)  # fmt: skip
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
