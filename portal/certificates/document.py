"""Steps 1-5 of verifying a certificate PDF (verification.py lists them), on the document alone: no
database. They run on untrusted bytes, so only in the sandbox's child process (sandbox.py)."""

from __future__ import annotations

import hashlib
import io
import re
from typing import Any

from portal.certificates import keys, pdf, seal, signing

# pdf.py's producer line, as pypdf writes it into the first object of every certificate.
KILN_PRODUCER = b"/Producer (Kiln "
PRODUCER_WINDOW = 4096  # bytes: object 1 follows the 9-byte header; its title adds at most ~200


def looks_like_kiln(data: bytes) -> bool:
    """The Kiln signature field, the payload attachment or Kiln's producer line is there (the raw
    bytes first: a damaged file may not parse, and WeasyPrint compresses the attachment names into
    object streams)."""
    if f"/T ({signing.FIELD_NAME})".encode() in data or pdf.PAYLOAD_NAME.encode() in data:
        return True
    if KILN_PRODUCER in data[:PRODUCER_WINDOW]:
        return True
    return bool({pdf.PAYLOAD_NAME, pdf.SEAL_NAME} & pdf.attachment_names(data))


def _first_page_text(data: bytes) -> str:
    from pypdf import PdfReader

    text = PdfReader(io.BytesIO(data)).pages[0].extract_text() or ""
    return re.sub(r"\s+", " ", text).strip()


def headline_mismatch(data: bytes, payload: dict[str, Any]) -> str:
    """'' when page 1 states the payload's verdict, cluster, number and waiver count, else what differs."""
    try:
        text = _first_page_text(data)
    except Exception as exc:  # pypdf raises many types on damaged content streams
        return f"the first page cannot be read ({type(exc).__name__})"
    cluster = (payload.get("cluster") or {}).get("name")
    expected = {
        "verdict": f"Acceptance certificate {payload.get('verdict')} Cluster {cluster} ",
        "number": f"Certificate number {payload.get('number')} ",
        "waivers": f"Waivers {len(payload.get('waivers') or [])} ",
    }
    missing = [name for name, phrase in expected.items() if phrase not in text + " "]
    if missing:
        return f"the first page does not state the sealed {', '.join(missing)}"
    return ""


def verify_document(data: bytes, store: keys.TrustStore) -> seal.Verdict:
    """Steps 1-5 (no database): run on untrusted bytes, so only in the sandbox (sandbox.py)."""
    if not data.startswith(b"%PDF-") or not looks_like_kiln(data):
        return seal.Verdict(seal.NOT_A_CERTIFICATE, "not a PDF carrying a Kiln signature or payload")
    try:
        payload_bytes, seal_data = pdf.pdf_extract(data)
    except pdf.NotACertificate as exc:
        return seal.Verdict(seal.TAMPERED, f"a Kiln certificate whose evidence cannot be read: {exc}")
    verdict = _verify_extracted(data, payload_bytes, seal_data, store)
    verdict.payload_sha256 = hashlib.sha256(payload_bytes).hexdigest()
    return verdict


def _verify_extracted(
    data: bytes, payload_bytes: bytes, seal_data: dict[str, Any], store: keys.TrustStore
) -> seal.Verdict:
    document = signing.pdf_signature_check(data, store.roots, store.tsa_roots)
    verdict = _judged(data, payload_bytes, seal_data, store, document)
    # A time only for a sound signature: a tampered document has no trusted time, whatever it carries.
    if document.status in (signing.INTACT, signing.UNTRUSTED) and verdict.status != seal.TAMPERED:
        verdict.time = {"time": document.time, "source": document.time_source, "tsa": document.tsa,
                        "note": document.time_note}  # fmt: skip
    return verdict


def _judged(
    data: bytes,
    payload_bytes: bytes,
    seal_data: dict[str, Any],
    store: keys.TrustStore,
    document: signing.SignatureCheck,
) -> seal.Verdict:
    if document.status == signing.UNSIGNED and payload_bytes.find(b'"format":"' + seal.LEGACY_FORMAT.encode()) >= 0:
        legacy = seal.verify(payload_bytes, seal_data, sorted(store.seal_fingerprints))
        legacy.legacy = legacy.ok
        return legacy
    if document.status in (signing.BROKEN, signing.UNSIGNED):
        return seal.Verdict(seal.TAMPERED, f"PDF signature: {document.detail}")
    verdict = seal.verify(payload_bytes, seal_data, sorted(store.seal_fingerprints))
    if verdict.status == seal.TAMPERED:
        return verdict
    payload = verdict.payload or {}
    bound = (payload.get("seal") or {}).get("pdf_certificate_sha256")
    if bound != document.signer_sha256:
        return seal.Verdict(
            seal.TAMPERED,
            f"the PDF is signed by certificate {document.signer_fingerprint}, not the one the payload names",
            payload,
            verdict.fingerprint,
        )
    if document.high_s and (payload.get("seal") or {}).get("ecdsa_s") == signing.LOW_S:
        return seal.Verdict(
            seal.TAMPERED,
            "PDF signature: the ECDSA signature has a high S, the n - s twin of the low-S one the portal wrote",
            payload,
            verdict.fingerprint,
        )
    mismatch = headline_mismatch(data, payload)
    if mismatch:
        return seal.Verdict(seal.TAMPERED, mismatch, payload, verdict.fingerprint)
    if document.status == signing.UNTRUSTED:
        return seal.Verdict(seal.UNKNOWN_KEY, f"PDF signature: {document.detail}", payload, verdict.fingerprint)
    if verdict.status == seal.UNKNOWN_KEY:
        return verdict
    verdict.detail = f"{document.detail}; {verdict.detail}"
    return verdict
