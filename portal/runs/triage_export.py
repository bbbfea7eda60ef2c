"""The triage view's exports: a CSV (one row per line) and an RMA-ready text per node."""

from __future__ import annotations

import csv
import io

from portal.runs.triage import Evidence, Line, Member, iso_utc

CSV_COLUMNS = (
    "status", "cause", "nodes", "node_count", "nodes_expanded", "checks", "rules", "measured", "gpus",
    "action", "reason", "results",
)  # fmt: skip


def _gpu_text(member: Member) -> list[str]:
    return [f"{member.hostname} GPU {g.index} serial {g.serial or '?'} PCI {g.bus_id or '?'}" for g in member.gpus]


def _measured(member: Member) -> list[str]:
    return [
        f"{member.hostname}{'' if e.gpu is None else f' GPU {e.gpu}'}: {e.rule} {e.measured}" for e in member.evidence
    ]


def csv_text(lines: list[Line]) -> str:
    """One row per line; the node set also expanded (space separated), per-node details joined by "; "."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for line in lines:
        writer.writerow(
            [
                line.status,
                line.cause,
                line.node_set,
                line.count,
                " ".join(m.hostname for m in line.members),
                "; ".join(line.checks),
                "; ".join(line.rules),
                "; ".join(t for m in line.members for t in _measured(m)),
                "; ".join(t for m in line.members for t in _gpu_text(m)),
                line.action,
                line.reason,
                " ".join(c.result_path for c, _ in line.cited),
            ]
        )
    return out.getvalue()


def summary_text(lines: list[Line]) -> str:
    """One text line per triage line, for a terminal (`kiln_demo --certificate`, `kiln_run`): status,
    nodes, checks, GPUs with serial and PCI bus id, rules with the values measured, and the action."""
    out = []
    for line in lines:
        parts = [f"{line.status.upper()} {line.node_set} ({line.count} node{'s' if line.count != 1 else ''})"]
        parts.append(", ".join(line.checks))
        gpus = [t for m in line.members for t in _gpu_text(m)]
        measured = [t for m in line.members for t in _measured(m)]
        parts += [f"GPUs: {'; '.join(gpus)}"] if gpus else []
        parts += [f"measured: {'; '.join(measured)} (limit: {'; '.join(line.rules)})"] if measured else []
        parts += [f"why: {line.reason}"] if not measured and line.reason else []
        parts.append(f"action: {line.action}")
        out.append(" | ".join(parts))
    return "\n".join(out) + ("\n" if out else "")


def _evidence_lines(e: Evidence) -> list[str]:
    where = "" if e.gpu is None else f" on GPU {e.gpu}"
    return [
        f"  - {e.check}: {e.rule}{where} measured {e.measured}, threshold {e.threshold or 'none recorded'}",
        f"    result {e.result_path}, recorded {iso_utc(e.recorded_at) or 'unknown'}",
    ]


def _member_block(member: Member) -> list[str]:
    out = [f"Fault: {member.status} ({member.remedy.cause}); action: {member.action}"]
    for gpu in member.gpus:
        out.append(f"GPU {gpu.index}: serial {gpu.serial or 'unknown'}, PCI bus id {gpu.bus_id or 'unknown'}")
    for cited in member.results:
        out.append(
            f"Check {cited.check}: result {cited.result_path} (run {cited.run_path}), "
            f"finished {iso_utc(cited.finished_at) or 'unknown'}"
        )
    if member.reason:
        out.append(f"Reason: {member.reason}")
    if member.evidence:
        out.append("Evidence:")
        for e in member.evidence:
            out += _evidence_lines(e)
    return out


def rma_text(lines: list[Line], *, hostname: str = "") -> str:
    """Per node (by name; only `hostname` when given): its hostname and serial, then each of its faults
    with the GPU's serial and PCI bus id and the evidence (measured value, threshold, check, result
    path, ISO 8601 UTC times)."""
    by_node: dict[str, list[Member]] = {}
    for line in lines:
        for member in line.members:
            if not hostname or member.hostname == hostname:
                by_node.setdefault(member.hostname, []).append(member)
    blocks = []
    for hostname in sorted(by_node):
        members = by_node[hostname]
        node = members[0].node
        text = [
            f"Node: {hostname}",
            f"Node serial: {node.serial or 'not recorded (set it on the node)'}",
            f"Cluster: {node.cluster.name}",
        ]
        for member in members:
            text += ["", *_member_block(member)]
        blocks.append("\n".join(text))
    return ("\n\n" + "=" * 72 + "\n\n").join(blocks) + ("\n" if blocks else "")
