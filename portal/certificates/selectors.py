"""Reads for campaigns: the current state per node × check, what is open, what a certificate cites.

A handful of queries per call, whatever the number of nodes or runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet

from portal.certificates.models import (
    AuditEvent,
    Campaign,
    Certificate,
    ScopeExclusion,
    Side,
    Signature,
    Waiver,
)
from portal.inventory.models import Node
from portal.runs.models import ACTIVE_STATUSES, CheckResult, Run, Scope, Status

# Evidence: a cancelled or skipped result says nothing about the hardware, so it never replaces one.
EVIDENCE = (Status.PASS, Status.WARN, Status.FAIL, Status.ERROR)
ACCEPTED = (Status.PASS, Status.WARN)  # warn = in spec, with a note (the run exit code treats it as pass)
WAIVABLE = (Status.FAIL, Status.ERROR)

# Cell states of the campaign grid.
OK = "pass"
WARN = "warn"
WAIVED = "waived"
OPEN_FAIL = "fail"
OPEN_ERROR = "error"
MISSING = "missing"
STATE_COLOURS = {OK: "green", WARN: "orange", WAIVED: "blue", OPEN_FAIL: "red", OPEN_ERROR: "purple", MISSING: "grey"}


@dataclass(slots=True)
class Cell:
    """A node × check of the campaign: the latest evidence, and whether it is settled."""

    node_id: int
    hostname: str
    item_key: str
    state: str
    result_id: int | None = None
    run_id: int | None = None
    result_status: str = ""
    reason: str = ""
    scope: str = Scope.NODE
    waiver: Waiver | None = None
    finished_at: datetime | None = None

    @property
    def open(self) -> bool:
        return self.state in (OPEN_FAIL, OPEN_ERROR, MISSING)

    @property
    def colour(self) -> str:
        return STATE_COLOURS[self.state]


@dataclass
class CampaignState:
    campaign: Campaign
    items: list[dict[str, Any]]
    nodes: list[Node]
    excluded: list[ScopeExclusion]
    rows: list[tuple[Node, list[Cell]]]
    active_runs: list[int]
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def cells(self) -> list[Cell]:
        return [cell for _, cells in self.rows for cell in cells]

    @property
    def open_cells(self) -> list[Cell]:
        return [cell for cell in self.cells if cell.open]

    @property
    def blockers(self) -> list[str]:
        """Why a certificate cannot be issued now (empty when it can)."""
        out = []
        if not self.rows:
            out.append("no node is in scope")
        opened = len(self.open_cells)
        if opened:
            out.append(f"{opened} node × check item(s) still open (no pass, no waiver)")
        if self.active_runs:
            out.append("run(s) still active: " + ", ".join(f"#{r}" for r in self.active_runs))
        return out

    @property
    def ready(self) -> bool:
        return not self.blockers


def campaign_list() -> QuerySet[Campaign]:
    return Campaign.objects.select_related("cluster", "plan").order_by("-created_at", "-id")


def campaign_runs(*, campaign: Campaign) -> QuerySet[Run]:
    return (
        Run.objects.filter(campaign_link__campaign=campaign)
        .select_related("requested_by")
        .order_by("-created_at", "-id")
    )


def _latest_results(campaign: Campaign) -> list[Mapping[str, Any]]:
    """Every final result of the campaign's runs, oldest first (later rows win)."""
    return list(
        CheckResult.objects.filter(
            run__campaign_link__campaign=campaign, status__in=EVIDENCE, item_key__in=campaign.item_keys
        )
        .order_by("run__created_at", "run_id", "id")
        .values(
            "id",
            "run_id",
            "node_id",
            "item_key",
            "status",
            "reason",
            "scope",
            "node_set",
            "attribution",
            "finished_at",
        )
    )


def campaign_state(*, campaign: Campaign) -> CampaignState:
    """Per in-scope node and plan item, the latest evidence, settled (pass/warn/waived) or open."""
    items = list(campaign.plan_snapshot["items"])
    nodes = list(Node.objects.filter(cluster_id=campaign.cluster_id).order_by("hostname"))
    excluded = list(campaign.exclusions.select_related("node", "excluded_by__person"))
    excluded_ids = {e.node_id for e in excluded}
    latest = _latest_per_node(campaign, {n.hostname: n for n in nodes})
    waivers = {
        (w.result_id, w.node_id): w
        for w in Waiver.objects.filter(campaign=campaign).select_related("granted_by__person", "node")
    }
    rows: list[tuple[Node, list[Cell]]] = []
    counts: dict[str, int] = {state: 0 for state in STATE_COLOURS}
    for node in nodes:
        if node.pk in excluded_ids:
            continue
        cells = [_cell(node, item["key"], latest.get((node.pk, item["key"])), waivers) for item in items]
        for cell in cells:
            counts[cell.state] += 1
        rows.append((node, cells))
    active = list(
        Run.objects.filter(campaign_link__campaign=campaign, status__in=ACTIVE_STATUSES).values_list("pk", flat=True)
    )
    return CampaignState(
        campaign=campaign, items=items, nodes=nodes, excluded=excluded, rows=rows, active_runs=active, counts=counts
    )


def _latest_per_node(campaign: Campaign, by_name: dict[str, Node]) -> dict[tuple[int, str], Mapping[str, Any]]:
    """(node id, item key) -> the latest result row; a group result counts for each node of its
    node set, with that node's own verdict from the attribution where it has one."""
    latest: dict[tuple[int, str], Mapping[str, Any]] = {}
    for row in _latest_results(campaign):
        if row["scope"] != Scope.GROUP:
            latest[(row["node_id"], row["item_key"])] = row
            continue
        attribution = row["attribution"] or {}
        # A group that failed with no node to blame (a PDU phase, a UPS, a loop of the heat soak) is
        # open on every node it spanned, as an unattributed group result is: never a quiet PASS.
        blamed = any((v or {}).get("status") in (Status.FAIL, Status.ERROR) for v in attribution.values())
        if row["status"] not in ACCEPTED and not blamed:
            attribution = {}
        for hostname in NodeSet(row["node_set"] or ""):
            node = by_name.get(hostname)
            if node is None:
                continue
            verdict = attribution.get(hostname) or {}
            latest[(node.pk, row["item_key"])] = {
                **row,
                "status": verdict.get("status") or row["status"],
                "reason": verdict.get("reason") or row["reason"],
            }
    return latest


def _cell(
    node: Node, item_key: str, found: Mapping[str, Any] | None, waivers: Mapping[tuple[int, int], Waiver]
) -> Cell:
    """One node's state for one plan item: missing, settled (ok, warn, waived) or open."""
    if found is None:
        return Cell(node.pk, node.hostname, item_key, MISSING)
    status = found["status"]
    waiver = waivers.get((found["id"], node.pk))
    if status in ACCEPTED:
        state = OK if status == Status.PASS else WARN
    elif waiver is not None:
        state = WAIVED
    else:
        state = OPEN_FAIL if status == Status.FAIL else OPEN_ERROR
    return Cell(
        node.pk,
        node.hostname,
        item_key,
        state,
        result_id=found["id"],
        run_id=found["run_id"],
        result_status=status,
        reason=found["reason"],
        scope=found["scope"],
        waiver=waiver if state == WAIVED else None,
        finished_at=found["finished_at"],
    )


def open_node_set(*, state: CampaignState) -> str:
    """The folded node set of the nodes with something open: the default target of a re-run."""
    return str(NodeSet.fromlist(sorted({c.hostname for c in state.open_cells}))) if state.open_cells else ""


def campaign_audit(*, campaign: Campaign) -> QuerySet[AuditEvent]:
    return campaign.audit.order_by("-at", "-id")


def pending_signatures(*, campaign: Campaign) -> list[Signature]:
    return list(
        campaign.signatures.filter(certificate__isnull=True, withdrawn=False).select_related("user").order_by("id")
    )


def campaign_certificates(*, campaign: Campaign) -> QuerySet[Certificate]:
    return campaign.certificates.defer("pdf", "payload").select_related("revocation").order_by("-issued_at", "-id")


def signer_side(*, user: User | AnonymousUser) -> str | None:
    """A signer's side is their organisation group: `vendor` or `customer` (exactly one of them)."""
    if not user.is_authenticated:
        return None
    names = set(user.groups.filter(name__in=[Side.VENDOR, Side.CUSTOMER]).values_list("name", flat=True))
    return names.pop() if len(names) == 1 else None
