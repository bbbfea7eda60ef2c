"""Writes for campaigns and certificates. Every step leaves an AuditEvent. Keyword-only, typed."""

from __future__ import annotations

import json
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.catalog.models import TestPlan
from portal.certificates import charts, pdf, seal
from portal.certificates.models import (
    AuditEvent,
    Campaign,
    CampaignRun,
    Certificate,
    CertifiedResult,
    ScopeExclusion,
    Signature,
    Waiver,
)
from portal.certificates.payload import body_build, body_digest
from portal.certificates.selectors import WAIVABLE, campaign_state, signer_side
from portal.inventory.models import Cluster, Node
from portal.roles import APPROVER, has_role
from portal.runs import services as run_services
from portal.runs.models import Run

MIN_JUSTIFICATION = 10


class CampaignError(ValueError):
    """The step cannot be taken as asked; the message says why, and nothing changed."""


def audit_record(*, campaign: Campaign, user: Any, action: str, detail: str = "") -> AuditEvent:
    return AuditEvent.objects.create(
        campaign=campaign,
        user=user if getattr(user, "pk", None) else None,
        username=user.get_username() if getattr(user, "pk", None) else "system",
        action=action,
        detail=detail,
    )


def _require_approver(user: Any) -> None:
    if not has_role(user, APPROVER):
        raise CampaignError("only a user with the approver role can do this")


def campaign_create(*, cluster: Cluster, plan: TestPlan, name: str, user: Any) -> Campaign:
    """Open a campaign; the plan is snapshotted now, so editing it later does not move the goal."""
    try:
        snapshot = run_services.plan_snapshot_build(plan=plan, cluster=cluster)
    except run_services.RunStartError as exc:
        raise CampaignError(str(exc)) from None
    with transaction.atomic():
        campaign = Campaign.objects.create(
            name=name.strip() or f"{plan.name} of {cluster.name}",
            cluster=cluster,
            plan=plan,
            plan_snapshot=snapshot,
            created_by=user if getattr(user, "pk", None) else None,
        )
        audit_record(
            campaign=campaign,
            user=user,
            action="campaign opened",
            detail=f"cluster {cluster.name}, plan {plan.slug} ({len(snapshot['items'])} checks)",
        )
    return campaign


def campaign_run_add(*, campaign: Campaign, run: Run, user: Any) -> CampaignRun:
    """Count an existing run of the campaign's cluster and plan."""
    if run.cluster_id != campaign.cluster_id:
        raise CampaignError(f"run #{run.pk} is on cluster {run.cluster_id}, not {campaign.cluster.name}")
    if run.plan_id != campaign.plan_id:
        raise CampaignError(f"run #{run.pk} ran another plan ({run.plan_snapshot.get('slug', '?')})")
    try:
        with transaction.atomic():
            link = CampaignRun.objects.create(campaign=campaign, run=run, added_by=user if user.pk else None)
            audit_record(campaign=campaign, user=user, action="run added", detail=f"run #{run.pk} on {run.node_set}")
    except IntegrityError:
        raise CampaignError(f"run #{run.pk} already belongs to a campaign") from None
    return link


def campaign_run_start(*, campaign: Campaign, node_set: str, user: Any, enqueue: bool = True) -> Run:
    """Start a run of the campaign's plan on chosen nodes (all in-scope nodes when empty) and count it."""
    cluster = campaign.cluster
    try:
        nodes = run_services.nodes_select(cluster=cluster, node_set=node_set)
    except run_services.RunStartError as exc:
        raise CampaignError(str(exc)) from None
    excluded = set(campaign.exclusions.values_list("node_id", flat=True))
    if node_set.strip():
        out = [n.hostname for n in nodes if n.pk in excluded]
        if out:
            raise CampaignError(f"out of scope in this campaign: {NodeSet.fromlist(out)}")
    nodes = [n for n in nodes if n.pk not in excluded]
    if not nodes:
        raise CampaignError("no in-scope node to run on")
    with transaction.atomic():
        try:
            run = run_services.run_start(
                cluster=cluster, plan=campaign.plan, nodes=nodes, requested_by=user, enqueue=enqueue
            )
        except run_services.RunStartError as exc:
            raise CampaignError(str(exc)) from None
        CampaignRun.objects.create(campaign=campaign, run=run, added_by=user if user.pk else None)
        audit_record(campaign=campaign, user=user, action="run started", detail=f"run #{run.pk} on {run.node_set}")
    return run


def node_scope_remove(*, campaign: Campaign, node: Node, reason: str, user: Any) -> ScopeExclusion:
    if node.cluster_id != campaign.cluster_id:
        raise CampaignError(f"{node.hostname} is not a node of {campaign.cluster.name}")
    if not reason.strip():
        raise CampaignError("say why the node leaves the scope (e.g. sent for RMA)")
    try:
        with transaction.atomic():
            exclusion = ScopeExclusion.objects.create(
                campaign=campaign, node=node, reason=reason.strip(), excluded_by=user if user.pk else None
            )
            audit_record(campaign=campaign, user=user, action="node out of scope", detail=f"{node.hostname}: {reason}")
    except IntegrityError:
        raise CampaignError(f"{node.hostname} is already out of scope") from None
    return exclusion


def node_scope_restore(*, campaign: Campaign, node: Node, user: Any) -> None:
    with transaction.atomic():
        deleted, _ = ScopeExclusion.objects.filter(campaign=campaign, node=node).delete()
        if not deleted:
            raise CampaignError(f"{node.hostname} is in scope already")
        audit_record(campaign=campaign, user=user, action="node back in scope", detail=node.hostname)


def waiver_grant(*, campaign: Campaign, hostname: str, item_key: str, justification: str, user: Any) -> Waiver:
    """Accept the current failing (or errored) result of one node × check, with a justification."""
    _require_approver(user)
    if len(justification.strip()) < MIN_JUSTIFICATION:
        raise CampaignError(f"a waiver needs a written justification (at least {MIN_JUSTIFICATION} characters)")
    state = campaign_state(campaign=campaign)
    cell = next((c for c in state.cells if c.hostname == hostname and c.item_key == item_key), None)
    if cell is None:
        raise CampaignError(f"{hostname} × {item_key} is not an in-scope item of this campaign")
    if cell.result_id is None or cell.result_status not in WAIVABLE:
        raise CampaignError(f"{hostname} × {item_key} has no failing result to waive (state: {cell.state})")
    if cell.waiver is not None:
        raise CampaignError(f"{hostname} × {item_key} is waived already")
    with transaction.atomic():
        waiver = Waiver.objects.create(
            campaign=campaign,
            result_id=cell.result_id,
            node_id=cell.node_id,
            item_key=item_key,
            justification=justification.strip(),
            granted_by=user,
        )
        audit_record(
            campaign=campaign,
            user=user,
            action="waiver granted",
            detail=f"{hostname} × {item_key} ({cell.result_status}, result #{cell.result_id}): {justification.strip()}",
        )
    return waiver


def certificate_sign(*, campaign: Campaign, user: AbstractBaseUser) -> Signature | Certificate:
    """One approver signs the current body. The second signature, from the other side, over the same
    body, issues the certificate (returned); otherwise the pending signature is returned."""
    _require_approver(user)
    side = signer_side(user=user)
    if side is None:
        raise CampaignError("a signer must belong to exactly one of the groups `vendor` and `customer`")
    with transaction.atomic():
        # Lock the campaign row: two approvers pressing "sign" together must not issue twice.
        campaign = Campaign.objects.select_for_update().select_related("cluster").get(pk=campaign.pk)
        state = campaign_state(campaign=campaign)
        if not state.ready:
            raise CampaignError("cannot sign yet: " + "; ".join(state.blockers))
        body = body_build(state=state)
        digest = body_digest(body)
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
        pending = [s for s in pending if s not in stale]
        if any(s.user_id == user.pk for s in pending):
            raise CampaignError("you have signed this already; the other side's approver signs next")
        if any(s.side == side for s in pending):
            raise CampaignError(f"the {side} side has signed already; the other side's approver signs next")
        signature = Signature.objects.create(
            campaign=campaign,
            side=side,
            user=user,
            name=user.get_full_name() or user.get_username(),
            body_sha256=digest,
        )
        audit_record(campaign=campaign, user=user, action="signed", detail=f"{side} side, body sha256 {digest}")
        if not pending:
            return signature
        return _issue(campaign=campaign, state=state, body=body, signatures=[*pending, signature], user=user)


def _number(campaign: Campaign, when: Any) -> str:
    # Unique per site: the certificate's own id would do, but a readable number names the cluster.
    count = Certificate.objects.filter(campaign__cluster=campaign.cluster).count() + 1
    return f"KILN-{campaign.cluster.name}-{when:%Y%m%d}-{count:03d}"


def _issue(
    *, campaign: Campaign, state: Any, body: dict[str, Any], signatures: list[Signature], user: Any
) -> Certificate:
    key = seal.signing_key_load()
    issued_at = timezone.now()
    number = _number(campaign, issued_at)
    payload = {
        **body,
        "number": number,
        "issued_at": issued_at.isoformat(),
        "signatures": [
            {
                "side": s.side,
                "username": s.user.get_username(),
                "name": s.name,
                "signed_at": s.signed_at.isoformat(),
                "body_sha256": s.body_sha256,
            }
            for s in sorted(signatures, key=lambda s: s.side != "vendor")
        ],
        "seal": {"algorithm": "Ed25519", "key_fingerprint": seal.fingerprint(key.public_key())},
    }
    payload_bytes = seal.canonical_bytes(payload)
    seal_data = seal.seal(payload_bytes, key)
    result_ids = sorted({c.result_id for c in state.cells if c.result_id is not None})
    chart_list, note = charts.charts_render(result_ids=result_ids, items=state.items)
    document = pdf.pdf_render(
        payload=json.loads(payload_bytes), payload_bytes=payload_bytes, seal_data=seal_data, charts=chart_list,
        charts_note=note,
    )  # fmt: skip
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
    CertifiedResult.objects.bulk_create(
        (CertifiedResult(certificate=certificate, result_id=rid) for rid in result_ids), batch_size=500
    )
    Signature.objects.filter(pk__in=[s.pk for s in signatures]).update(certificate=certificate)
    audit_record(
        campaign=campaign,
        user=user,
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
        certificate = Certificate.objects.select_for_update().get(pk=certificate.pk)
        if certificate.revoked:
            raise CampaignError(f"{certificate.number} is revoked already")
        certificate.revoked_at = timezone.now()
        certificate.revoked_by = user
        certificate.revoke_reason = reason.strip()
        certificate.save(update_fields=["revoked_at", "revoked_by", "revoke_reason"])
        audit_record(
            campaign=certificate.campaign,
            user=user,
            action="certificate revoked",
            detail=f"{certificate.number}: {reason}",
        )
    return certificate


def certificate_verify(*, data: bytes) -> seal.Verdict:
    """valid / tampered / unknown key / not a certificate, for PDF bytes; notes what this portal
    knows of the number (issued here, revoked, or a different payload under the same number)."""
    try:
        payload_bytes, seal_data = pdf.pdf_extract(data)
    except pdf.NotACertificate as exc:
        return seal.Verdict(seal.NOT_A_CERTIFICATE, str(exc))
    verdict = seal.verify(payload_bytes, seal_data, [k.fingerprint for k in seal.trusted_keys()])
    if verdict.payload and verdict.status == seal.VALID:
        number = verdict.payload.get("number", "")
        known = Certificate.objects.filter(number=number).only("sha256", "revoked_at", "revoke_reason").first()
        if known is None:
            verdict.notes.append(f"{number} is not in this portal's database (issued elsewhere, or the DB was reset).")
        elif known.sha256 != seal_data.get("sha256"):
            verdict.notes.append(f"this portal issued {number} with a different digest ({known.sha256}).")
        elif known.revoked:
            verdict.notes.append(f"{number} was REVOKED on {known.revoked_at:%Y-%m-%d}: {known.revoke_reason}")
        else:
            verdict.notes.append(f"{number} was issued by this portal and is not revoked.")
    return verdict
