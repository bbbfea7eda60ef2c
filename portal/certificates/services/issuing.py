"""Writes for certificates: signing, issuing (render, seal, record) and revoking. Every step leaves
an AuditEvent. Keyword-only, typed."""

from __future__ import annotations

import json
from typing import Any

from cryptography.hazmat.primitives import serialization
from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.utils import timezone

from portal.certificates import auditchain, charts, keys, pdf, seal, signing
from portal.certificates.models import (
    Campaign,
    Certificate,
    CertifiedResult,
    Revocation,
    Signature,
)
from portal.certificates.payload import body_build, body_digest
from portal.certificates.phases import phase_ranges
from portal.certificates.selectors import campaign_state, signer_side
from portal.certificates.services.campaigns import CampaignError, _require_approver, _require_open, audit_record
from portal.certificates.task_names import CERTIFICATE_ISSUE
from portal.inventory.models import Cluster
from portal.people import organisation_of
from portal.runs.models import Scope
from worker.celery import app


def certificate_sign(*, campaign: Campaign, user: User | AnonymousUser) -> Signature:
    """One approver signs the current body. When the other side has signed the same body, the
    certificate is issued by a task (rendering and sealing take minutes at 1,000+ nodes, too long
    for a request); the campaign shows it as issuing until then."""
    user = _require_approver(user)
    side = signer_side(user=user)
    if side is None:
        raise CampaignError("a signer must belong to exactly one of the groups `vendor` and `customer`")
    with transaction.atomic():
        # Lock the campaign row: two approvers pressing "sign" together must not issue twice.
        campaign = Campaign.objects.select_for_update().select_related("cluster").get(pk=campaign.pk)
        _require_open(campaign)
        state = campaign_state(campaign=campaign)
        if not state.ready:
            raise CampaignError("cannot sign yet: " + "; ".join(state.blockers))
        digest = body_digest(body_build(state=state))
        pending = _withdraw_stale(campaign=campaign, digest=digest, user=user)
        if any(s.user_id == user.pk for s in pending):
            raise CampaignError("you have signed this already; the other side's approver signs next")
        if any(s.side == side for s in pending):
            raise CampaignError(f"the {side} side has signed already; the other side's approver signs next")
        signature = Signature.objects.create(
            campaign=campaign,
            side=side,
            user=user,
            name=user.get_full_name() or user.get_username(),
            organisation=organisation_of(user),
            body_sha256=digest,
        )
        audit_record(campaign=campaign, user=user, action="signed", detail=f"{side} side, body sha256 {digest}")
        if pending:
            _issue_request(campaign)
    return signature


def _withdraw_stale(*, campaign: Campaign, digest: str, user: Any) -> list[Signature]:
    """Withdraw pending signatures given over another body; returns those still standing."""
    pending = list(campaign.signatures.filter(certificate__isnull=True, withdrawn=False).select_related("user"))
    stale = [s for s in pending if s.body_sha256 != digest]
    for s in stale:
        s.withdrawn = True
        s.save(update_fields=["withdrawn"])
        audit_record(
            campaign=campaign,
            user=user,
            action="signature withdrawn",
            detail=f"{s.side} signature of {s.user.get_username()}: the evidence changed since it was given",
        )
    return [s for s in pending if s not in stale]


def _issue_request(campaign: Campaign) -> None:
    campaign.issue_requested_at = timezone.now()
    campaign.issue_error = ""
    campaign.save(update_fields=["issue_requested_at", "issue_error"])
    campaign_id = campaign.pk
    transaction.on_commit(lambda: _enqueue_issue(campaign_id))


def _enqueue_issue(campaign_id: int) -> None:
    # By name: the task calls these services (app.signature finds the registered task, eager mode too).
    app.signature(CERTIFICATE_ISSUE).delay(campaign_id)


def certificate_issue_retry(*, campaign: Campaign, user: User | AnonymousUser) -> None:
    """Ask again for a certificate both sides signed (after a failed or lost issuing attempt)."""
    _require_approver(user)
    with transaction.atomic():
        campaign = Campaign.objects.select_for_update().get(pk=campaign.pk)
        _require_open(campaign)
        if _signed_pair(campaign) is None:
            raise CampaignError("there is no pair of vendor and customer signatures waiting for a certificate")
        previous = campaign.issue_error or "no certificate yet"
        _issue_request(campaign)
        audit_record(campaign=campaign, user=user, action="certificate issue retried", detail=f"after: {previous}")


def _signed_pair(campaign: Campaign) -> list[Signature] | None:
    """The standing vendor and customer signatures over one body, vendor first; None if incomplete."""
    pending = list(
        campaign.signatures.filter(certificate__isnull=True, withdrawn=False).select_related("user").order_by("id")
    )
    sides = {s.side: s for s in pending}
    if set(sides) != {"vendor", "customer"} or sides["vendor"].body_sha256 != sides["customer"].body_sha256:
        return None
    return [sides["vendor"], sides["customer"]]


def _issue_settle(campaign_id: int) -> None:
    Campaign.objects.filter(pk=campaign_id).update(issue_requested_at=None, issue_error="")


def certificate_issue_failed(*, campaign_id: int, error: str, requested_at: Any = None) -> None:
    """Record why issuing failed: the campaign shows it, and an approver can retry. With
    `requested_at`, only if no newer request (a retry) came in meanwhile."""
    campaign = Campaign.objects.get(pk=campaign_id)
    target = Campaign.objects.filter(pk=campaign_id)
    if requested_at is not None:
        target = target.filter(issue_requested_at=requested_at)
    target.update(issue_error=error[:2000])
    audit_record(campaign=campaign, user=None, action="certificate issue failed", detail=error[:2000])


def certificate_issue(*, campaign_id: int) -> Certificate | None:
    """Issue the certificate over the body both sides signed: the task behind the second signature.

    Safe to run twice. The PDF is rendered outside any lock; then, under the campaign's lock, the
    evidence is digested again and the certificate is recorded only if nothing changed meanwhile
    (else the signatures over the old body are withdrawn and nothing is issued)."""
    campaign = Campaign.objects.select_related("cluster").get(pk=campaign_id)
    signatures = _signed_pair(campaign)
    if signatures is None:
        _issue_settle(campaign_id)  # issued already, or a signature was withdrawn
        return None
    state = campaign_state(campaign=campaign)
    body = body_build(state=state)
    digest = body_digest(body)
    if signatures[0].body_sha256 != digest:
        _issue_abandon(campaign_id, digest)
        return None
    if not state.ready:  # e.g. a run started after both signed: wait for it, then retry
        _issue_blocked(campaign_id, state)
        return None
    identity = keys.signing_identity_load()  # KeyringError: shown on the campaign, never a new key
    # A TSA that is configured but unusable (TimestampError) fails the issuing, shown on the campaign:
    # never a certificate without the trusted time the site asked for.
    timestamping = signing.timestamping_configured()
    issued_at = timezone.now()
    for collision in range(5):
        number = _number(campaign, issued_at, identity, skip=collision)
        payload_bytes, seal_data, document, note = _render(
            body=body, state=state, number=number, issued_at=issued_at, signatures=signatures, identity=identity,
            timestamping=timestamping,
        )  # fmt: skip
        with transaction.atomic():
            campaign = Campaign.objects.select_for_update().select_related("cluster").get(pk=campaign_id)
            if campaign.certificates.exists():  # issued by an earlier delivery of this task
                _issue_settle(campaign_id)
                return None
            current = _signed_pair(campaign)
            if current is None or [s.pk for s in current] != [s.pk for s in signatures]:
                _issue_settle(campaign_id)
                return None
            now_state = campaign_state(campaign=campaign)
            if body_digest(body_build(state=now_state)) != digest:
                _issue_abandon(campaign_id, None)
                return None
            if not now_state.ready:
                _issue_blocked(campaign_id, now_state)
                return None
            # Numbers count a cluster's certificates: campaigns of one cluster record one at a time.
            Cluster.objects.select_for_update().filter(pk=campaign.cluster_id).first()
            if Certificate.objects.filter(number=number).exists():
                continue  # another campaign of this cluster took the number meanwhile
            certificate = _record(
                campaign=campaign, state=state, body=body, number=number, issued_at=issued_at,
                payload_bytes=payload_bytes, seal_data=seal_data, document=document, note=note, signatures=signatures,
            )  # fmt: skip
            _issue_settle(campaign_id)
            return certificate
    raise CampaignError(f"no free certificate number for {campaign.cluster.name} on {issued_at:%Y-%m-%d}")


def _issue_blocked(campaign_id: int, state: Any) -> None:
    """Both signatures stand but the campaign is not ready (a run is active): say so; an approver
    retries once it is settled (the banner offers it)."""
    certificate_issue_failed(campaign_id=campaign_id, error="cannot issue yet: " + "; ".join(state.blockers))


def _issue_abandon(campaign_id: int, digest: str | None) -> None:
    """The evidence changed after both signed: withdraw their signatures; they sign the new body."""
    with transaction.atomic():
        campaign = Campaign.objects.select_for_update().get(pk=campaign_id)
        if digest is None:
            digest = body_digest(body_build(state=campaign_state(campaign=campaign)))
        _withdraw_stale(campaign=campaign, digest=digest, user=None)
        _issue_settle(campaign_id)


NUMBER_LENGTH = 64  # Certificate.number's max_length
SITE_DIGITS = 8  # hex digits of the seal key's SHA-256: sites collide with odds 1 in 4 billion


def site_tag(identity: keys.SigningIdentity) -> str:
    """The site part of a certificate number: the start of the SHA-256 of the sealing key, so two
    sites (each counting its own clusters from 001) never issue the same number."""
    return seal.sha256_hex(seal.public_raw(identity.seal_key.public_key()))[:SITE_DIGITS]


def _number(campaign: Campaign, when: Any, identity: keys.SigningIdentity, skip: int = 0) -> str:
    # Unique per site: the certificate's own id would do, but a readable number names the cluster;
    # unique across sites by the site tag. Older numbers (KILN-cluster-date-NNN) stay valid as issued.
    count = Certificate.objects.filter(campaign__cluster=campaign.cluster).count() + 1 + skip
    tail = f"-{site_tag(identity)}-{when:%Y%m%d}-{count:03d}"
    return f"KILN-{campaign.cluster.name[: NUMBER_LENGTH - len('KILN-') - len(tail)]}{tail}"


def _render(
    *,
    body: dict[str, Any],
    state: Any,
    number: str,
    issued_at: Any,
    signatures: list[Signature],
    identity: keys.SigningIdentity,
    timestamping: signing.Timestamping | None = None,
) -> tuple[bytes, dict[str, Any], bytes, str]:
    """The sealed payload, its seal, the signed PDF and the charts note."""
    payload = {
        **body,
        "number": number,
        "issued_at": issued_at.isoformat(),
        # The audit chain's head when rendered: deleting or altering any event up to it shows.
        "audit_head": auditchain.head(),
        "signatures": [
            {
                "side": s.side,
                "username": s.user.get_username(),
                "name": s.name,
                "organisation": s.organisation,
                "signed_at": s.signed_at.isoformat(),
                "body_sha256": s.body_sha256,
            }
            for s in signatures
        ],
        "seal": {
            "algorithm": "Ed25519",
            "key_fingerprint": seal.fingerprint(identity.seal_key.public_key()),
            "pdf_signature": (
                "PAdES B-LT (RFC 3161 timestamp), ECDSA P-256 / SHA-256"
                if timestamping
                else "PAdES B-B with validation data, ECDSA P-256 / SHA-256"
            ),
            "pdf_certificate_sha256": keys.cert_sha256(identity.pdf_cert),
            "ecdsa_s": signing.LOW_S,  # the verifier refuses the high-S twin of this signature
        },
    }
    payload_bytes = seal.canonical_bytes(payload)
    seal_data = seal.seal(payload_bytes, identity.seal_key)
    result_ids = sorted({c.result_id for c in state.cells if c.result_id is not None})
    chart_list, note = charts.charts_render(result_ids=result_ids, items=state.items)
    document = pdf.pdf_render(
        payload=json.loads(payload_bytes), payload_bytes=payload_bytes, seal_data=seal_data, charts=chart_list,
        charts_note=note, signer=keys.cert_fingerprint(identity.pdf_cert),
        ca_fingerprint=keys.cert_fingerprint(keys.trust_anchor(identity)),
        phases=phase_ranges(c.result_id for c in state.cells if c.result_id is not None and c.scope != Scope.GROUP),
    )  # fmt: skip
    crl = keys.site_crl(identity)
    signed = signing.pdf_sign(
        document, identity, reason=f"Kiln acceptance certificate {number}: {body['verdict']}",
        location=body["cluster"]["site"], timestamping=timestamping,
        crl=crl.public_bytes(serialization.Encoding.DER) if crl is not None else None,
    )  # fmt: skip
    return payload_bytes, seal_data, signed, note


def _record(
    *,
    campaign: Campaign,
    state: Any,
    body: dict[str, Any],
    number: str,
    issued_at: Any,
    payload_bytes: bytes,
    seal_data: dict[str, Any],
    document: bytes,
    note: str,
    signatures: list[Signature],
) -> Certificate:
    certificate = Certificate.objects.create(
        campaign=campaign,
        number=number,
        issued_at=issued_at,
        verdict=body["verdict"],
        payload=payload_bytes.decode("utf-8"),
        sha256=seal_data["sha256"],
        seal=seal_data,
        key_fingerprint=seal_data["key_fingerprint"],
        pdf=document,
        charts_note=note[:300],
    )
    result_ids = sorted({c.result_id for c in state.cells if c.result_id is not None})
    CertifiedResult.objects.bulk_create(
        (CertifiedResult(certificate=certificate, result_id=rid) for rid in result_ids), batch_size=500
    )
    Signature.objects.filter(pk__in=[s.pk for s in signatures]).update(certificate=certificate)
    audit_record(
        campaign=campaign,
        user=None,
        action="certificate issued",
        detail=f"{number}: {body['verdict']}, sha256 {seal_data['sha256']}, key {seal_data['key_fingerprint']}",
    )
    return certificate


def certificate_revoke(*, certificate: Certificate, reason: str, user: Any) -> Certificate:
    """Revoke with a reason. The certificate and its evidence stay as they were; it is never edited."""
    _require_approver(user)
    if not reason.strip():
        raise CampaignError("say why the certificate is revoked")
    with transaction.atomic():
        certificate = Certificate.objects.select_for_update().defer("pdf", "payload").get(pk=certificate.pk)
        if Revocation.objects.filter(certificate=certificate).exists():
            raise CampaignError(f"{certificate.number} is revoked already")
        Revocation.objects.create(
            certificate=certificate,
            revoked_at=timezone.now(),
            revoked_by=user if getattr(user, "pk", None) else None,
            username=user.get_username() if getattr(user, "pk", None) else "system",
            reason=reason.strip(),
        )
        audit_record(
            campaign=certificate.campaign,
            user=user,
            action="certificate revoked",
            detail=f"{certificate.number}: {reason}",
        )
    return certificate
