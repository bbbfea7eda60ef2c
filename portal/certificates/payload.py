"""The certificate body: what a campaign's current state cites, as plain JSON-able data.

Built from the database only (no clock), so two approvers signing minutes apart see the same body
digest unless the evidence itself changed. Queries are batched: a fixed number per 500 results."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from checks.presentation import presentation_of
from portal.certificates import seal
from portal.certificates.models import CertificateVerdict
from portal.certificates.selectors import WAIVED, CampaignState
from portal.runs.models import CheckResult, Measurement, Run, Scope, Series, points_digest

CHUNK = 500


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def _measurement(m: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": m["name"],
        "value": m["value"],
        "text": m["text"],
        "unit": m["unit"],
        "gpu": m["gpu"],
        "threshold": m["threshold"],
        "ok": m["ok"],
        "labels": m["labels"] or {},
    }


def _output_digest(r: dict[str, Any], stream: str) -> str:
    """The SHA-256 a certificate cites for a result's output: of the exact bytes the node printed,
    as stored when it was recorded (CheckResult.stdout_sha256: `sha256sum` of the result page's raw
    download gives it). A result recorded before Kiln kept raw bytes has no such digest: then the
    stored text is the output, and its UTF-8 is hashed (what certificates cited before)."""
    return r[f"{stream}_sha256"] or seal.sha256_hex(r[stream])


def _strip_taken_at(snapshot: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in snapshot.items() if k != "taken_at"}


@dataclass
class CitedEvidence:
    """What the cited results hold, read in chunks: rows, measurements and series digests by id."""

    results: dict[int, dict[str, Any]] = field(default_factory=dict)
    measurements: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    series_hash: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    def of(self, rid: int) -> dict[str, Any]:
        """The evidence a certificate cites for one result."""
        r = self.results[rid]
        return {
            "result_id": rid,
            "run_id": r["run_id"],
            "kind": r["kind"],
            "status": r["status"],
            "reason": r["reason"],
            "command": r["command"],
            "exit_code": r["exit_code"],
            "started_at": _iso(r["started_at"]),
            "finished_at": _iso(r["finished_at"]),
            "stdout_sha256": _output_digest(r, "stdout"),
            "stderr_sha256": _output_digest(r, "stderr"),
            "output_truncated": r["output_truncated"],
            "series_sha256": seal.sha256_hex(seal.canonical_bytes(self.series_hash[rid])),
            "measurements": self.measurements[rid],
        }


def evidence_load(*, result_ids: list[int]) -> CitedEvidence:
    """Step 1: the cited results, their measurements and their series' digests (four queries per
    chunk of 500 results at most)."""
    ev = CitedEvidence(measurements={rid: [] for rid in result_ids}, series_hash={rid: [] for rid in result_ids})
    for chunk in _chunks(result_ids):
        for r in CheckResult.objects.filter(pk__in=chunk).values(
            "id", "run_id", "item_key", "kind", "status", "reason", "scope", "node_set", "attribution", "command",
            "exit_code", "stdout", "stderr", "stdout_sha256", "stderr_sha256", "output_truncated", "started_at",
            "finished_at", "node__hostname",
        ):  # fmt: skip
            ev.results[r["id"]] = dict(r)
        for m in (
            Measurement.objects.filter(result_id__in=chunk)
            .order_by("result_id", "gpu", "name", "id")
            .values("result_id", "name", "value", "text", "unit", "gpu", "threshold", "ok", "labels")
        ):
            ev.measurements[m["result_id"]].append(_measurement(m))
        _series_digests(chunk, ev.series_hash)
    return ev


def _series_digests(chunk: list[int], series_hash: dict[int, list[dict[str, Any]]]) -> None:
    """The points are cited by the digest taken when they were stored, not re-read here (older
    series without one are hashed now)."""
    unhashed: dict[int, dict[str, Any]] = {}
    for row in (
        Series.objects.filter(result_id__in=chunk)
        .order_by("result_id", "name", "gpu", "id")
        .values("id", "result_id", "name", "unit", "x_unit", "gpu", "labels", "points_sha256")
    ):
        s: dict[str, Any] = dict(row)  # a plain dict: its keys are popped and it is cited as is
        pk = s.pop("id")
        series_hash[s.pop("result_id")].append(s)
        if not s["points_sha256"]:
            unhashed[pk] = s
    for stored in Series.objects.filter(pk__in=list(unhashed)).only("id", "x_packed", "y_packed"):
        unhashed[stored.pk]["points_sha256"] = points_digest(stored.x, stored.y)


def _identity_fields(state: CampaignState) -> dict[str, dict[str, str]]:
    """Plan item key -> {measurement name: GPU identity field}, for the items whose check kind
    declares GPU identities (gpu_inventory: serials and UUIDs)."""
    out = {}
    for item in state.items:
        fields = dict(presentation_of(item["kind"]).gpu_identity)
        if fields:
            out[item["key"]] = fields
    return out


def _cell_entry(cell: Any, ev: CitedEvidence, group_ids: set[int]) -> dict[str, Any]:
    entry: dict[str, Any] = {"state": cell.state}
    if cell.result_id is not None:
        if cell.scope == Scope.GROUP:
            group_ids.add(cell.result_id)
            entry.update(
                {"result_id": cell.result_id, "status": cell.result_status, "reason": cell.reason, "group": True}
            )
        else:
            entry.update(ev.of(cell.result_id))
        if cell.state == WAIVED and cell.waiver is not None:
            entry["waiver_id"] = cell.waiver.pk
    return entry


def node_entry(
    *, node: Any, row_cells: list[Any], ev: CitedEvidence, identity: dict[str, dict[str, str]], group_ids: set[int]
) -> dict[str, Any]:
    """Step 2, per node: its identity, its GPUs' identities and each check's cited evidence. The
    group results it appears in are added to `group_ids` (cited once, beside the nodes)."""
    gpus: dict[int, dict[str, Any]] = {}
    checks: dict[str, Any] = {}
    for cell in row_cells:
        checks[cell.item_key] = _cell_entry(cell, ev, group_ids)
        fields = identity.get(cell.item_key)
        if not fields or cell.result_id is None or cell.scope != "node":
            continue
        for m in ev.measurements[cell.result_id]:
            if m["gpu"] is not None and m["name"] in fields:
                gpus.setdefault(m["gpu"], {"index": m["gpu"], "uuid": "", "serial": ""})
                gpus[m["gpu"]][fields[m["name"]]] = m["text"]
    return {
        "hostname": node.hostname,
        "serial": node.serial,
        "rack": node.rack,
        "position": node.position,
        "group": node.group,
        "gpus": [gpus[i] for i in sorted(gpus)],
        "checks": checks,
    }


def _summary(state: CampaignState) -> list[dict[str, Any]]:
    """Per check: how many nodes, in which states."""
    summary = []
    for item in state.items:
        item_cells = [c for c in state.cells if c.item_key == item["key"]]
        counts: dict[str, int] = {}
        for c in item_cells:
            counts[c.state] = counts.get(c.state, 0) + 1
        summary.append(
            {"key": item["key"], "name": item["name"], "kind": item["kind"], "nodes": len(item_cells), "states": counts}
        )
    return summary


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


def _waivers(state: CampaignState) -> list[dict[str, Any]]:
    return [
        {
            "id": w.pk,
            "node": w.node.hostname,
            "item_key": w.item_key,
            "result_id": w.result_id,
            "justification": w.justification,
            "granted_by": w.granted_by.get_username(),
            "granted_by_name": w.granted_by.get_full_name(),
            "granted_at": _iso(w.granted_at),
        }
        for w in sorted((c.waiver for c in state.cells if c.waiver is not None), key=lambda w: w.pk)
    ]


def _out_of_scope(state: CampaignState) -> list[dict[str, Any]]:
    return [
        {
            "node": e.node.hostname,
            "serial": e.node.serial,
            "reason": e.reason,
            "by": e.excluded_by.get_username() if e.excluded_by else "",
            "at": _iso(e.excluded_at),
        }
        for e in state.excluded
    ]


def body_build(*, state: CampaignState) -> dict[str, Any]:
    """Everything the certificate asserts except its number, issue date, signatures and seal: load
    the cited evidence, then one entry per node, then the summaries around them."""
    campaign = state.campaign
    cluster = campaign.cluster
    result_ids = sorted({c.result_id for c in state.cells if c.result_id is not None})
    ev = evidence_load(result_ids=result_ids)
    identity = _identity_fields(state)
    group_ids: set[int] = set()
    nodes_out = [
        node_entry(node=node, row_cells=row_cells, ev=ev, identity=identity, group_ids=group_ids)
        for node, row_cells in state.rows
    ]
    group_results = [
        {**ev.of(rid), **{k: ev.results[rid][k] for k in ("item_key", "node_set", "attribution")}}
        for rid in sorted(group_ids)
    ]
    runs_out, plans = _runs_and_plans(campaign, {ev.results[rid]["run_id"] for rid in result_ids})
    waivers = _waivers(state)
    starts = [r["started_at"] for r in runs_out if r["started_at"]]
    ends = [r["finished_at"] for r in runs_out if r["finished_at"]]
    return {
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
        "summary": _summary(state),
        "nodes": nodes_out,
        "group_results": group_results,
        "waivers": waivers,
        "out_of_scope": _out_of_scope(state),
        "counts": {
            "nodes_in_scope": len(state.rows),
            "nodes_out_of_scope": len(state.excluded),
            "checks": len(state.items),
        },
    }


def body_digest(body: dict[str, Any]) -> str:
    return seal.sha256_hex(seal.canonical_bytes(body))
