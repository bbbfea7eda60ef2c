"""Verifying a certificate PDF offline: one answer of five, with the test that decided it.

Order of the tests (the first that fails decides):
1. Is it a Kiln certificate at all? A PDF that carries neither the Kiln signature field, nor the Kiln
   attachments, nor Kiln's producer line (the first object of every certificate, so it survives a
   truncated download) is NOT_A_CERTIFICATE (3). Once one is there, every later failure is TAMPERED:
   a damaged file that was a certificate is not "not a certificate".
2. The PDF signature (signing.py) covers every byte: broken -> TAMPERED (1); sound but by a CA this
   site does not trust -> UNKNOWN_KEY (2), unless a test below finds tampering first.
3. The Ed25519 seal over the attached payload (seal.py): digest, signature, key.
4. The two are bound: the payload names the certificate that signed the PDF.
5. The first page says what the payload says (verdict, cluster, number, waivers).
6. The portal's own record, for a certificate this portal issued (its number *and* the seal key
   that sealed it match a row: another site's numbers and keys are not this portal's business): a
   revocation gives REVOKED (4); a payload digest or a file that is not byte for byte the stored PDF
   is TAMPERED. Another site's certificate is judged by its signatures against the trusted keys.
An evidence export (format 3: export.py) is checked against the digests of a sound certificate
(evidence_check): every node's record must hash to its sealed digest, and the answer names any node
whose record differs, is missing, or is not in the certificate.
Format 1 certificates (issued before PDF signatures) have no signed pages: they verify only when the
file is byte for byte the copy this portal stored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from django.db.models import QuerySet

from portal.certificates import auditchain, export, keys, seal
from portal.certificates.models import Certificate

EXIT_CODES = {seal.VALID: 0, seal.TAMPERED: 1, seal.UNKNOWN_KEY: 2, seal.NOT_A_CERTIFICATE: 3, seal.REVOKED: 4}
EVIDENCE_MISMATCH_EXIT = 5  # the certificate is sound, the evidence export checked against it is not
SOUND = (seal.VALID, seal.REVOKED, seal.UNKNOWN_KEY)  # the sealed payload itself verified


def _own_records(verdict: seal.Verdict) -> QuerySet[Certificate]:
    """This portal's rows for the certificate: its number sealed by the same key. A number alone may
    be another site's (older numbers carry no site part)."""
    number = (verdict.payload or {}).get("number", "")
    return Certificate.objects.filter(number=number, key_fingerprint=verdict.fingerprint)


def _legacy_check(verdict: seal.Verdict, data: bytes) -> seal.Verdict:
    number = (verdict.payload or {}).get("number", "")
    stored = _own_records(verdict).values_list("pdf", flat=True).first()
    if stored is None or hashlib.sha256(bytes(stored)).digest() != hashlib.sha256(data).digest():
        return seal.Verdict(
            seal.TAMPERED,
            f"{number} is a format-1 certificate: its pages carry no signature, and this file is not the copy "
            "this portal issued",
            verdict.payload,
            verdict.fingerprint,
        )
    verdict.notes.append("format 1: the payload is sealed and the file is identical to the copy this portal issued")
    return verdict


def certificate_verify(*, data: bytes, digests: bool = False, hardware: bool = False) -> seal.Verdict:
    """All six steps: the document (in a sandboxed child process), then what this portal knows of
    its number. With `digests`, the verdict's payload summary carries the sealed evidence digests
    (format 3) for checking an evidence export (evidence_check); with `hardware`, the sealed
    hardware identities (format 4) for comparing with the live nodes (hardware.py)."""
    from portal.certificates.sandbox import verify_isolated

    verdict = verify_isolated(data, digests=digests, hardware=hardware)
    if verdict.legacy and verdict.status == seal.VALID:
        verdict = _legacy_check(verdict, data)
    if verdict.status != seal.VALID or not verdict.payload:
        return verdict
    number = verdict.payload.get("number", "")
    known = _own_records(verdict).select_related("revocation").defer("pdf", "payload").first()
    if known is None:
        # This site's own key with no row: the row may have been deleted by a role that lifted the
        # triggers; the audit log, which records every issue, says whether that happened. The sealed
        # head is not required here: a database restored from an older dump lacks it honestly.
        if _sealed_here(verdict.fingerprint):
            tampered = auditchain.certificate_problem(number=number, audit_head=None)
            if tampered:
                return seal.Verdict(seal.TAMPERED, tampered, verdict.payload, verdict.fingerprint, verdict.notes)
        verdict.notes.append(_unrecorded(number, verdict.fingerprint))
        return verdict
    if known.sha256 != verdict.payload_sha256:
        verdict.notes.append(f"this portal issued {number} with a different digest ({known.sha256}).")
        return seal.Verdict(seal.TAMPERED, verdict.notes[-1], verdict.payload, verdict.fingerprint, verdict.notes)
    stored = Certificate.objects.filter(pk=known.pk).values_list("pdf", flat=True).get()
    if hashlib.sha256(bytes(stored)).digest() != hashlib.sha256(data).digest():
        verdict.notes.append(
            f"this file is not byte for byte the PDF this portal issued as {number}: its signatures verify, "
            "but a re-encoded signature or added data still changes a certificate"
        )
        return seal.Verdict(seal.TAMPERED, verdict.notes[-1], verdict.payload, verdict.fingerprint, verdict.notes)
    tampered = auditchain.certificate_problem(number=number, audit_head=verdict.payload.get("audit_head"))
    if tampered:
        return seal.Verdict(seal.TAMPERED, tampered, verdict.payload, verdict.fingerprint, verdict.notes)
    if known.revoked:
        r = known.revocation
        return seal.Verdict(
            seal.REVOKED,
            f"{number} was REVOKED on {r.revoked_at:%Y-%m-%d %H:%M} UTC by {r.username}: {r.reason}",
            verdict.payload,
            verdict.fingerprint,
            verdict.notes,
            time=verdict.time,
        )
    verdict.notes.append(f"{number} was issued by this portal and is not revoked.")
    return verdict


def _sealed_here(fingerprint: str) -> bool:
    own = {k.fingerprint for k in keys.trust_store_load().keys if k.role is keys.KeyRole.SEAL and not k.imported}
    return fingerprint in own


def _unrecorded(number: str, fingerprint: str) -> str:
    if _sealed_here(fingerprint):
        return f"{number} is not in this portal's database, though this site's key sealed it (was the database reset?)."
    return (
        f"{number} was sealed by another site's key ({fingerprint}) that this site trusts: its signatures verify; "
        "this portal keeps no record of it (nor of its revocation)."
    )


def evidence_check(*, verdict: seal.Verdict, lines: Iterable[bytes]) -> export.EvidenceCheck:
    """An evidence export against the digests of a certificate verified with `digests=True`."""
    payload = verdict.payload or {}
    if verdict.status not in SOUND:
        return export.EvidenceCheck(False, "the certificate itself did not verify: its digests prove nothing")
    if payload.get("format") not in seal.DIGEST_FORMATS:
        return export.EvidenceCheck(
            False, f"a {payload.get('format')} certificate carries its evidence in its payload: no digests to check"
        )
    return export.evidence_verify(
        lines=lines, digests=payload.get("evidence_digests") or {}, payload_sha256=verdict.payload_sha256
    )
