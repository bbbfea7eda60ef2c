"""What the public verify page (no login) answers: the verification's status and the certificate's
identity, nothing else of the portal. Built from a verdict of the same bounded service as the
logged-in verify page (verification.py, run in sandbox.py's limited child).

The identity (number, cluster, issued time, the certificate's own verdict) is shown only when this
site vouches for it: valid, or revoked. A tampered file or one signed by a key this site does not
trust states whatever its maker wrote, so only the status is answered. The revocation's date and
reason are answered; who revoked it, the verifier's detail (digests, key file names, notes about the
database) and every internal id are not."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.http import HttpRequest

from portal.certificates import keys, seal
from portal.certificates.models import Certificate

MEANINGS = {
    seal.VALID: "Every byte is as this site signed it, and the certificate is not revoked.",
    seal.TAMPERED: (
        "The file was changed after it was signed, or it is not the certificate this site issued under "
        "that number. Do not rely on it."
    ),
    seal.UNKNOWN_KEY: "The file is signed, but not by a key this site trusts: this site did not issue it.",
    seal.NOT_A_CERTIFICATE: "This file is not a Kiln certificate.",
    seal.REVOKED: "The certificate is genuine, but this site has withdrawn it. Do not rely on it.",
}
VOUCHED = (seal.VALID, seal.REVOKED)


@dataclass(frozen=True)
class PublicAnswer:
    status: str
    meaning: str
    number: str = ""
    cluster: str = ""
    issued_at: str = ""
    certificate_verdict: str = ""
    revoked_at: str = ""
    revocation_reason: str = ""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def public_answer(verdict: seal.Verdict) -> PublicAnswer:
    """The public part of `verdict`."""
    status = verdict.status if verdict.status in MEANINGS else seal.TAMPERED
    payload = verdict.payload or {}
    if status not in VOUCHED or not payload:
        return PublicAnswer(status, MEANINGS[status])
    cluster = payload.get("cluster") or {}
    answer = PublicAnswer(
        status,
        MEANINGS[status],
        number=str(payload.get("number", "")),
        cluster=str(cluster.get("name", "")) if isinstance(cluster, dict) else "",
        issued_at=str(payload.get("issued_at", "")),
        certificate_verdict=str(payload.get("verdict", "")),
    )
    if status != seal.REVOKED:
        return answer
    revoked = (
        Certificate.objects.filter(number=answer.number, key_fingerprint=verdict.fingerprint, revocation__isnull=False)
        .values_list("revocation__revoked_at", "revocation__reason")
        .first()
    )
    if revoked is None:  # the verifier found the revocation a moment ago; a row deleted since says no more
        return answer
    return PublicAnswer(**{**asdict(answer), "revoked_at": revoked[0].isoformat(), "revocation_reason": revoked[1]})


def site_ca_fingerprint() -> str:
    """The site CA's SHA-256 fingerprint, for visitors to compare with their PDF reader's; empty
    before `kiln keys init`."""
    try:
        return keys.cert_fingerprint(keys.site_ca())
    except keys.KeyringError:
        return ""


def wants_json(request: HttpRequest) -> bool:
    """`?format=json`, or an Accept header that prefers JSON to HTML (curl, scripts)."""
    if request.GET.get("format") == "json":
        return True
    accept = request.headers.get("Accept", "")
    return "application/json" in accept and "text/html" not in accept
