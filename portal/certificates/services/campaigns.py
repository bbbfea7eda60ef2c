"""Writes for campaigns: create, add and start runs, node scope and waivers. Every step leaves an
AuditEvent. Keyword-only, typed."""

from __future__ import annotations

from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.contrib.auth.models import AnonymousUser, User
from django.db import IntegrityError, transaction

from portal.catalog.models import TestPlan
from portal.certificates import auditchain
from portal.certificates.models import (
    AuditEvent,
    Campaign,
    CampaignRun,
    ScopeExclusion,
    Waiver,
)
from portal.certificates.selectors import WAIVABLE, campaign_state
from portal.inventory.models import Cluster, Node
from portal.roles import APPROVER, has_role
from portal.runs import services as run_services
from portal.runs.models import Run

MIN_JUSTIFICATION = 10


class CampaignError(ValueError):
    """The step cannot be taken as asked; the message says why, and nothing changed."""


def audit_record(*, campaign: Campaign, user: Any, action: str, detail: str = "") -> AuditEvent:
    """Appended to the hash chain (auditchain.py)."""
    return auditchain.append(campaign=campaign, user=user, action=action, detail=detail)


def _require_approver(user: User | AnonymousUser) -> User:
    """The user, once known to hold the approver role (an anonymous one never does)."""
    if isinstance(user, AnonymousUser) or not has_role(user, APPROVER):
        raise CampaignError("only a user with the approver role can do this")
    return user


def _require_open(campaign: Campaign) -> None:
    """A campaign with a certificate is closed: its evidence is what the certificate says (the
    database refuses changes too). Certifying again takes a new campaign."""
    number = campaign.certificates.order_by("issued_at").values_list("number", flat=True).first()
    if number:
        raise CampaignError(
            f"this campaign is closed: certificate {number} was issued from it; open a new campaign to certify again"
        )


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
    _require_open(campaign)
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
    _require_open(campaign)
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
    _require_open(campaign)
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
    _require_open(campaign)
    with transaction.atomic():
        deleted, _ = ScopeExclusion.objects.filter(campaign=campaign, node=node).delete()
        if not deleted:
            raise CampaignError(f"{node.hostname} is in scope already")
        audit_record(campaign=campaign, user=user, action="node back in scope", detail=node.hostname)


def waiver_withdraw(*, campaign: Campaign, waiver_id: int, reason: str, user: Any) -> None:
    """Take back a waiver before a certificate cites it; the item is open again. Recorded with the
    justification it had, who withdrew it and why. A signature over the old body no longer stands."""
    _require_approver(user)
    _require_open(campaign)
    if not reason.strip():
        raise CampaignError("say why the waiver is withdrawn")
    with transaction.atomic():
        waiver = (
            Waiver.objects.select_for_update().select_related("node").filter(pk=waiver_id, campaign=campaign).first()
        )
        if waiver is None:
            raise CampaignError(f"no waiver #{waiver_id} in this campaign")
        what = f"{waiver.node.hostname} × {waiver.item_key} (result #{waiver.result_id})"
        waiver.delete()
        audit_record(
            campaign=campaign,
            user=user,
            action="waiver withdrawn",
            detail=f"{what}: {reason.strip()} (it said: {waiver.justification})",
        )


def waiver_grant(*, campaign: Campaign, hostname: str, item_key: str, justification: str, user: Any) -> Waiver:
    """Accept the current failing (or errored) result of one node × check, with a justification."""
    _require_approver(user)
    _require_open(campaign)
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
