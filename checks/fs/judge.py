"""Judging steps of the filesystem checks (checks/fs/throughput.py): rates in GB/s against floors, and
fs_aggregate's group verdict in steps (job errors, per-node rates, aggregate, node deficits)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    WARN,
    Finding,
    GroupContext,
    GroupVerdict,
    Measurement,
    ParamsError,
    Verdict,
)

GB = 1e9  # thresholds are decimal GB/s, as storage vendors quote them
DIRECTIONS = ("write", "read")


# Beside the steps that judge them: filesystem.py imports both, nothing imports back.
@dataclass
class FsAggregateThresholds:
    # None = not judged unless the profile or the site sets a number (aggregate throughput is a
    # property of the storage system bought, not of the GPU node model).
    min_aggregate_write_gbps: float | None = None
    min_aggregate_read_gbps: float | None = None
    # A node this far below the median node in the same concurrent run is the odd one out (client
    # NIC, cabling, mount options). Conservative default; tune per site.
    max_node_deficit_pct: float | None = 30.0

    def __post_init__(self) -> None:
        for name in ("min_aggregate_write_gbps", "min_aggregate_read_gbps", "max_node_deficit_pct"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ParamsError(f"threshold {name!r}: must be >= 0 or None")


def gbps(value: float | None) -> str:
    return "?" if value is None else f"{value / GB:.2f}".rstrip("0").rstrip(".")


def fio_sum(measurements: list[Measurement], name: str, host: str = "") -> Measurement | None:
    for m in measurements:
        if m.name == name and m.labels.get("host", "") == host and "job" not in m.labels:
            return m
    return None


def judge_floor(m: Measurement, floor: float | None, what: str, scope: str) -> Finding | None:
    if floor is None or m.value is None:
        return None
    m.threshold = f">= {floor:g} GB/s"
    m.ok = m.value >= floor * GB
    if m.ok:
        return None
    return Finding(FAIL, f"{what} {gbps(m.value)} GB/s below the {floor:g} GB/s {scope} floor")


# --- fs_aggregate ----------------------------------------------------------------------------


def host_index(group: GroupContext) -> dict[str, str]:
    """What fio reports as `hostname` (the --client string, less ",port") -> node hostname."""
    index: dict[str, str] = {}
    for n in group.nodes:
        index[n.hostname] = n.hostname
        if n.address:
            index[n.address] = n.hostname
    return index


def moved(measurements: list[Measurement], ddir: str, host: str) -> bool:
    m = fio_sum(measurements, f"{ddir}_bytes_sum", host)
    return bool(m and m.value)


def job_errors(measurements: list[Measurement], by_host: dict[str, str]) -> list[tuple[str, Finding]]:
    """(node, finding) for each fio job that failed."""
    out: list[tuple[str, Finding]] = []
    for m in measurements:
        if m.name == "job_error":
            failed = by_host.get(m.labels.get("host", ""), m.labels.get("host", "?"))
            out.append(
                (
                    failed,
                    Finding(ERROR, f"{failed}: fio job {m.labels.get('job')} failed with error {int(m.value or 0)}"),
                )
            )
    return out


NodeRates = dict[str, dict[str, float]]  # direction -> node -> B/s


def node_rates(
    measurements: list[Measurement], by_host: dict[str, str]
) -> tuple[list[Finding], NodeRates, dict[tuple[str, str], Measurement]]:
    """Each node's write/read rate (only where it moved bytes), labelled with its node; unknown hosts are errors."""
    findings: list[Finding] = []
    rates: NodeRates = {d: {} for d in DIRECTIONS}
    per_node_rates: dict[tuple[str, str], Measurement] = {}
    for m in measurements:
        host = m.labels.get("host", "")
        if m.name in ("write_bw_sum", "read_bw_sum") and host and "job" not in m.labels:
            name = by_host.get(host) or by_host.get(host.split(",")[0])
            if name is None:
                findings.append(Finding(ERROR, f"fio reported results for unknown host {host!r}"))
                continue
            m.labels["node"] = name
            ddir = m.name.split("_")[0]
            if m.value is not None and moved(measurements, ddir, host):
                rates[ddir][name] = m.value
                per_node_rates[(ddir, name)] = m
    return findings, rates, per_node_rates


def missing_results(group: GroupContext, rates: NodeRates) -> list[tuple[str, Finding]]:
    out: list[tuple[str, Finding]] = []
    for n in group.nodes:
        missing = [d for d in DIRECTIONS if n.hostname not in rates[d]]
        if missing:
            why = f"{n.hostname}: no fio {'/'.join(missing)} results (fio server not reachable?)"
            out.append((n.hostname, Finding(ERROR, why)))
    return out


def aggregate_finding(
    measurements: list[Measurement],
    t: FsAggregateThresholds,
    ddir: str,
    floor: float | None,
    per_node: dict[str, float],
) -> Finding:
    """The sum over the nodes (recorded as aggregate_<ddir>_bw) against its floor, if one is set."""
    if not per_node:
        return Finding(ERROR, f"no node reported {ddir} results")
    total = sum(per_node.values())
    agg = Measurement(name=f"aggregate_{ddir}_bw", value=total, unit="B/s", labels={"nodes": str(len(per_node))})
    measurements.append(agg)
    compared = t.max_node_deficit_pct is not None and len(per_node) >= 2
    said = f"aggregate {ddir} {gbps(total)} GB/s over {len(per_node)} nodes"
    if floor is not None:
        bad = judge_floor(agg, floor, f"aggregate {ddir}", f"aggregate ({len(per_node)} nodes)")
        return bad or Finding(PASS, said)
    if compared:
        # The nodes are still judged against each other; the sum is only recorded.
        return Finding(PASS, f"{said} (aggregate not judged: no min_aggregate_{ddir}_gbps set)")
    # Nothing at all compared with a threshold: never a bare pass.
    return Finding(WARN, f"{said}: not judged (no min_aggregate_{ddir}_gbps, no node comparison)")


def deficits(
    t: FsAggregateThresholds,
    ddir: str,
    per_node: dict[str, float],
    per_node_rates: dict[tuple[str, str], Measurement],
) -> list[tuple[str, Finding]]:
    """Nodes more than max_node_deficit_pct below the median node (needs two nodes to compare)."""
    deficit = t.max_node_deficit_pct
    if deficit is None or len(per_node) < 2:
        return []
    out: list[tuple[str, Finding]] = []
    median = statistics.median(per_node.values())
    for name, value in sorted(per_node.items()):
        pct = 100.0 * value / median if median else 100.0
        rate = per_node_rates[(ddir, name)]
        rate.threshold = f">= {100.0 - deficit:g}% of the median node"
        rate.ok = 100.0 - pct <= deficit
        if not rate.ok:
            out.append((name, Finding(FAIL, f"{name}: {ddir} {gbps(value)} GB/s, {pct:.0f}% of the median node")))
    return out


def group_verdict(
    findings: list[Finding], node_findings: dict[str, list[Finding]], measurements: list[Measurement]
) -> GroupVerdict:
    """Per-node verdicts for the nodes with findings, and the group's (its pass reason: the aggregates)."""
    node_verdicts: dict[str, Verdict] = {}
    for name, fs in node_findings.items():
        if fs:
            node_verdicts[name] = Verdict.from_findings(fs)
            findings += fs
    for m in measurements:
        if m.name == "client_error":
            findings.append(Finding(ERROR, m.text))
    verdict = Verdict.from_findings(findings, pass_reason="all nodes within spec")
    if verdict.status == PASS:
        verdict.reason = "; ".join(f.reason for f in findings if f.reason.startswith("aggregate"))
    return GroupVerdict(
        status=verdict.status, reason=verdict.reason, findings=verdict.findings, node_verdicts=node_verdicts
    )
