"""Per-node summaries of a format-3 certificate body: what each check concluded, in a bounded size.

Per check of a node: the cell state, the cited result, its status, the reason when it is not a plain
pass, the check's key metrics folded to one number per node (checks/core/presentation.py), and its first
few out-of-spec measurements. Everything else is in the node's evidence record (evidence.py),
whose digest the summary carries. Measurement ranges per check (for the PDF) are gathered on the
way, over every node."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from checks import presentation_of
from checks.core.presentation import KeyMetric
from portal.certificates import evidence, hardware, seal
from portal.certificates.selectors import WAIVED
from portal.runs.models import Scope

REASON_MAX = 500  # characters of a non-pass reason kept in the body (the evidence has all of it)
OUT_OF_SPEC_MAX = 8  # out-of-spec measurements listed per check of a node (the count is always there)
NAME, VALUE, TEXT, UNIT, GPU, THRESHOLD, OK, LABELS = range(8)  # evidence.MEASUREMENT_COLUMNS


def _number(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _fold(metric: KeyMetric, rows: list[list[Any]]) -> float | None:
    """One number per node for a key metric: its GPUs folded (worst or sum), scaled to its unit."""
    wanted = dict(metric.labels)
    values = [
        v
        for row in rows
        if row[NAME] == metric.name and all(row[LABELS].get(k) == x for k, x in wanted.items())
        for v in [_number(row[VALUE])]
        if v is not None
    ]
    if not values:
        return None
    agg = sum if metric.gpu_agg == "sum" else (max if metric.gpu_agg == "max" else min)
    return agg(values) * metric.scale


def _out_of_spec(row: list[Any]) -> dict[str, Any]:
    return {
        "name": row[NAME],
        "gpu": row[GPU],
        "value": row[VALUE] if row[VALUE] is not None else row[TEXT],
        "unit": row[UNIT],
        "threshold": row[THRESHOLD],
    }


def result_summary(record: dict[str, Any], state: str) -> dict[str, Any]:
    """A cited result in a few hundred bytes at most."""
    rows = record["measurements"]
    out: dict[str, Any] = {"result_id": record["result_id"], "run_id": record["run_id"], "status": record["status"]}
    if record["status"] != "pass" or state != "pass":
        out["reason"] = record["reason"][:REASON_MAX]
    metrics = {}
    for metric in presentation_of(record["kind"]).key_metrics:
        value = _fold(metric, rows)
        if value is not None:
            metrics[metric.key] = seal.canonical(value)
    if metrics:
        out["metrics"] = metrics
    bad = [row for row in rows if row[OK] is False]
    if bad:
        out["out_of_spec"] = [_out_of_spec(row) for row in bad[:OUT_OF_SPEC_MAX]]
        out["out_of_spec_count"] = len(bad)
    return out


@dataclass
class Gathered:
    """What the build gathers over all nodes: value ranges per check, group results, counts."""

    ranges: dict[str, dict[tuple[str, str, str], list[float]]] = field(default_factory=dict)
    group_ids: set[int] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=lambda: {"results": 0, "measurements": 0, "series": 0})

    def add(self, record: dict[str, Any]) -> None:
        by_name = self.ranges.setdefault(record["item_key"], {})
        for row in record["measurements"]:
            value = _number(row[VALUE])
            if row[THRESHOLD] and value is not None:
                by_name.setdefault((row[NAME], row[UNIT], row[THRESHOLD]), []).append(value)
        self.counts["results"] += 1
        self.counts["measurements"] += len(record["measurements"])
        self.counts["series"] += len(record["series"])

    def ranges_of(self, item_key: str) -> list[dict[str, Any]]:
        return [
            {"name": name, "unit": unit, "threshold": threshold, "n": len(values),
             "min": min(values), "median": median(values), "max": max(values)}
            for (name, unit, threshold), values in sorted(self.ranges.get(item_key, {}).items())
        ]  # fmt: skip


def _gpus(records: list[dict[str, Any]], identity: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    gpus: dict[int, dict[str, Any]] = {}
    for record in records:
        fields = identity.get(record["item_key"]) or {}
        for row in record["measurements"] if fields else ():
            if row[GPU] is not None and row[NAME] in fields:
                gpus.setdefault(row[GPU], {"index": row[GPU], "uuid": "", "serial": ""})[fields[row[NAME]]] = row[TEXT]
    return [gpus[i] for i in sorted(gpus)]


def node_summary(
    *, node: Any, cells: list[Any], loaded: evidence.Loaded, identity: dict[str, dict[str, str]], gathered: Gathered
) -> dict[str, Any]:
    """A node's entry in the body: identity, GPU identities, the hardware identities its results
    name (hardware.py), a summary per check, and the digest of its evidence record (its node-scope
    results, by plan item key)."""
    checks: dict[str, Any] = {}
    records = []
    for cell in cells:
        entry: dict[str, Any] = {"state": cell.state}
        if cell.result_id is not None and cell.scope == Scope.GROUP:
            gathered.group_ids.add(cell.result_id)
            entry.update({"result_id": cell.result_id, "status": cell.result_status, "group": True})
        elif cell.result_id is not None:
            record = loaded.record(cell.result_id)
            records.append(record)
            gathered.add(record)
            entry.update(result_summary(record, cell.state))
        if cell.state == WAIVED and cell.waiver is not None:
            entry["waiver_id"] = cell.waiver.pk
        checks[cell.item_key] = entry
    return {
        "hostname": node.hostname,
        "serial": node.serial,
        "rack": node.rack,
        "position": node.position,
        "group": node.group,
        "gpus": _gpus(records, identity),
        "hardware": hardware.node_hardware(records),
        "checks": checks,
        "evidence_sha256": evidence.digest(evidence.node_record(node.hostname, records)),
    }


def group_summaries(gathered: Gathered) -> list[dict[str, Any]]:
    """The group results the nodes cite, once each: summary and evidence digest."""
    loaded = evidence.load(result_ids=sorted(gathered.group_ids))
    out = []
    for rid in sorted(gathered.group_ids):
        record = evidence.group_record(loaded, rid)
        gathered.add(record)
        out.append(
            {
                **result_summary(record, "pass" if record["status"] == "pass" else record["status"]),
                "item_key": record["item_key"],
                "node_set": record["node_set"],
                "evidence_sha256": evidence.digest(record),
            }
        )
    return out
