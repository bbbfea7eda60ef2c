"""The certificate body: what a campaign's current state cites, as plain JSON-able data.

Built from the database only (no clock), so two approvers signing minutes apart see the same body
digest unless the evidence itself changed. Format 3: per node a bounded summary and the SHA-256 of its
detailed evidence (summary.py, evidence.py), read NODE_CHUNK nodes at a time, so the body grows by a
few KiB per node and memory stays bounded; the evidence is exported and checked separately (export.py).
Every exception is named with what a reader needs to judge it: a waiver with the node, check, the
out-of-spec measurements it accepts, the justification and its approver (full name, organisation,
side); an out-of-scope node with its reason and who took it out.
A body may carry "sections" (sections.py): the subjects a cited group result judged apart from its
nodes (racks, PDU phases, UPS, loops), with their verdicts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import User

from checks import presentation_of
from portal.certificates import evidence, seal, sections, summary
from portal.certificates.models import CertificateVerdict, Side
from portal.certificates.selectors import CampaignState
from portal.people import organisation_of
from portal.runs.models import Run, Scope

NODE_CHUNK = 250  # nodes whose evidence is in memory at once


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _strip_taken_at(snapshot: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in snapshot.items() if k != "taken_at"}


def _identity_fields(state: CampaignState) -> dict[str, dict[str, str]]:
    """Plan item key -> {measurement name: GPU identity field}, for the items whose check kind
    declares GPU identities (gpu_inventory: serials and UUIDs)."""
    out = {}
    for item in state.items:
        fields = dict(presentation_of(item["kind"]).gpu_identity)
        if fields:
            out[item["key"]] = fields
    return out


def _summary(state: CampaignState, gathered: summary.Gathered) -> list[dict[str, Any]]:
    """Per check: how many nodes, in which states, its key metrics' units, and the range of every
    judged measurement over the nodes."""
    out = []
    for item in state.items:
        item_cells = [c for c in state.cells if c.item_key == item["key"]]
        counts: dict[str, int] = {}
        for c in item_cells:
            counts[c.state] = counts.get(c.state, 0) + 1
        metrics = [{"key": m.key, "label": m.label, "unit": m.unit} for m in presentation_of(item["kind"]).key_metrics]
        out.append(
            {"key": item["key"], "name": item["name"], "kind": item["kind"], "nodes": len(item_cells),
             "states": counts, "metrics": metrics, "ranges": gathered.ranges_of(item["key"])}
        )  # fmt: skip
    return out


def _runs_and_plans(campaign: Any, cited_runs: set[int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The campaign's runs, and the plan snapshot(s) the cited results were judged by (a plan edited
    mid-campaign shows twice)."""
    plans: dict[str, dict[str, Any]] = {}
    runs_out = []
    for run in (
        Run.objects.filter(campaign_link__campaign=campaign).select_related("requested_by").order_by("created_at", "id")
    ):
        runs_out.append(
            {
                "id": run.pk,
                "status": run.status,
                "node_set": run.node_set,
                "parent_id": run.parent_id,
                "requested_by": run.requested_by.get_username() if run.requested_by else "",
                "started_at": _iso(run.started_at),
                "finished_at": _iso(run.finished_at),
            }
        )
        if run.pk in cited_runs:
            snap = _strip_taken_at(run.plan_snapshot)
            digest = seal.sha256_hex(seal.canonical_bytes(snap))
            plans.setdefault(digest, {"sha256": digest, "runs": [], "snapshot": snap})["runs"].append(run.pk)
    return runs_out, sorted(plans.values(), key=lambda p: p["runs"][0])


def _sides(users: list[Any]) -> dict[int, str]:
    """User id -> side (vendor, customer), for the users who belong to exactly one side."""
    found: dict[int, set[str]] = {}
    rows = User.groups.through.objects.filter(
        user_id__in={u.pk for u in users}, group__name__in=Side.values
    ).values_list("user_id", "group__name")
    for user_id, name in rows:
        found.setdefault(user_id, set()).add(name)
    return {user_id: names.pop() for user_id, names in found.items() if len(names) == 1}


def _findings(check: dict[str, Any]) -> dict[str, Any]:
    """What a waiver covers: the result's status and reason, and its out-of-spec measurements (value
    against the threshold that judged it), from the cited result's summary."""
    out: dict[str, Any] = {"status": check.get("status", ""), "reason": check.get("reason", "")}
    out["findings"] = list(check.get("out_of_spec") or [])
    out["findings_count"] = check.get("out_of_spec_count", len(out["findings"]))
    return out


def _waivers(state: CampaignState, nodes: list[dict[str, Any]], groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every waiver of the body: the node and check it covers, what was out of spec, the approver's
    full name, organisation and side, and the justification. A waiver has no expiry: it accepts the
    one result it names, for this certificate."""
    waivers = sorted((c.waiver for c in state.cells if c.waiver is not None), key=lambda w: w.pk)
    names = {item["key"]: item["name"] for item in state.items}
    checks = {(n["hostname"], key): check for n in nodes for key, check in n["checks"].items()}
    group_by_id = {g["result_id"]: g for g in groups}
    sides = _sides([w.granted_by for w in waivers])
    out = []
    for w in waivers:
        check = checks.get((w.node.hostname, w.item_key)) or {}
        if check.get("group"):
            check = {**group_by_id.get(check.get("result_id"), {}), "status": check.get("status", "")}
        out.append(
            {
                "id": w.pk,
                "node": w.node.hostname,
                "item_key": w.item_key,
                "check": names.get(w.item_key, w.item_key),
                "result_id": w.result_id,
                **_findings(check),
                "justification": w.justification,
                "granted_by": w.granted_by.get_username(),
                "granted_by_name": w.granted_by.get_full_name(),
                "granted_by_organisation": organisation_of(w.granted_by),
                "granted_by_side": sides.get(w.granted_by.pk, ""),
                "granted_at": _iso(w.granted_at),
            }
        )
    return out


def _out_of_scope(state: CampaignState) -> list[dict[str, Any]]:
    return [
        {
            "node": e.node.hostname,
            "serial": e.node.serial,
            "reason": e.reason,
            "by": e.excluded_by.get_username() if e.excluded_by else "",
            "by_name": e.excluded_by.get_full_name() if e.excluded_by else "",
            "by_organisation": organisation_of(e.excluded_by),
            "at": _iso(e.excluded_at),
        }
        for e in state.excluded
    ]


def _nodes(state: CampaignState, gathered: summary.Gathered) -> list[dict[str, Any]]:
    """One summary per node, NODE_CHUNK nodes' evidence in memory at a time."""
    identity = _identity_fields(state)
    out = []
    for start in range(0, len(state.rows), NODE_CHUNK):
        rows = state.rows[start : start + NODE_CHUNK]
        ids = [c.result_id for _, cells in rows for c in cells if c.result_id is not None and c.scope != Scope.GROUP]
        loaded = evidence.load(result_ids=ids)
        for node, cells in rows:
            out.append(
                summary.node_summary(node=node, cells=cells, loaded=loaded, identity=identity, gathered=gathered)
            )
    return out


def body_build(*, state: CampaignState) -> dict[str, Any]:
    """Everything the certificate asserts except its number, issue date, signatures and seal: per
    node a summary and the digest of its evidence, then the summaries around them."""
    campaign = state.campaign
    cluster = campaign.cluster
    gathered = summary.Gathered()
    nodes_out = _nodes(state, gathered)
    group_results = summary.group_summaries(gathered)
    cited_runs = {c.run_id for c in state.cells if c.result_id is not None and c.run_id is not None}
    runs_out, plans = _runs_and_plans(campaign, cited_runs)
    waivers = _waivers(state, nodes_out, group_results)
    starts = [r["started_at"] for r in runs_out if r["started_at"]]
    ends = [r["finished_at"] for r in runs_out if r["finished_at"]]
    body: dict[str, Any] = {
        "format": seal.FORMAT,
        "verdict": CertificateVerdict.PASS_WITH_WAIVERS if waivers else CertificateVerdict.PASS,
        "cluster": {
            "name": cluster.name,
            "customer": cluster.customer,
            "site": cluster.site,
            "profile": cluster.profile,
        },
        "campaign": {
            "id": campaign.pk,
            "name": campaign.name,
            "plan": campaign.plan_snapshot.get("slug", ""),
            "opened_at": _iso(campaign.created_at),
            "testing_started_at": min(starts) if starts else None,
            "testing_finished_at": max(ends) if ends else None,
        },
        "campaign_plan": _strip_taken_at(campaign.plan_snapshot),
        "plans": plans,
        "runs": runs_out,
        "summary": _summary(state, gathered),
        "nodes": nodes_out,
        "group_results": group_results,
        "evidence": {
            "format": evidence.FORMAT,
            "measurement_columns": list(evidence.MEASUREMENT_COLUMNS),
            "series_columns": list(evidence.SERIES_COLUMNS),
            **gathered.counts,
        },
        "waivers": waivers,
        "out_of_scope": _out_of_scope(state),
        "counts": {
            "nodes_in_scope": len(state.rows),
            "nodes_out_of_scope": len(state.excluded),
            "checks": len(state.items),
        },
    }
    # Only when a cited result has one: a body without sections is what it was before they existed.
    found = sections.sections_build(result_ids=gathered.group_ids)
    if found:
        body["sections"] = found
    return body


def body_digest(body: dict[str, Any]) -> str:
    return seal.sha256_hex(seal.canonical_bytes(body))
