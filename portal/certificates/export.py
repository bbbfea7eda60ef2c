"""The detailed evidence of a format-3 certificate as JSON lines, and checking such an export against
the digests its sealed payload carries.

An export: a header line {"format": "kiln-evidence/1", "certificate", "payload_sha256", "nodes",
"group_results", "measurement_columns", "series_columns"}, then one line per node in the payload's
order, then one per group result (evidence.py says what a record holds). Each record line is the
canonical JSON of the record, so `sha256` of the line (without its newline) is the node's sealed
`evidence_sha256`. The records are read from the database by the result ids the payload cites,
NODE_CHUNK nodes at a time, and streamed: an export of 12,500 nodes is never in memory at once."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from portal.certificates import evidence, seal

NODE_CHUNK = 250
LINE_MAX = 256 * 1024**2  # one record line: far above any node's evidence, bounds a hostile file


class NoEvidence(ValueError):
    """The certificate's format carries its evidence in the payload itself (format 2): no export."""


def _cited(node: dict[str, Any]) -> list[int]:
    return [c["result_id"] for c in node["checks"].values() if "result_id" in c and not c.get("group")]


def node_records(nodes: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Each node's evidence record, rebuilt from the results its summary cites (the digest matches
    while the evidence is unchanged, and cited evidence cannot change: immutability.py)."""
    for start in range(0, len(nodes), NODE_CHUNK):
        chunk = nodes[start : start + NODE_CHUNK]
        loaded = evidence.load(result_ids=[rid for node in chunk for rid in _cited(node)])
        for node in chunk:
            yield evidence.node_record(node["hostname"], [loaded.record(rid) for rid in _cited(node)])


def group_records(groups: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    loaded = evidence.load(result_ids=[g["result_id"] for g in groups])
    for g in groups:
        yield evidence.group_record(loaded, g["result_id"])


def evidence_lines(*, payload: dict[str, Any], payload_sha256: str) -> Iterator[bytes]:
    """The export of a sealed payload, line by line. Raises NoEvidence for a format-2 payload."""
    if payload.get("format") not in seal.DIGEST_FORMATS:
        raise NoEvidence(f"a {payload.get('format')} certificate carries its evidence in its payload")
    header = {
        "format": evidence.FORMAT,
        "certificate": payload.get("number", ""),
        "payload_sha256": payload_sha256,
        "nodes": len(payload["nodes"]),
        "group_results": len(payload["group_results"]),
        "measurement_columns": list(evidence.MEASUREMENT_COLUMNS),
        "series_columns": list(evidence.SERIES_COLUMNS),
    }
    yield seal.plain_bytes(header) + b"\n"
    for record in node_records(payload["nodes"]):
        yield evidence.record_bytes(record) + b"\n"
    for record in group_records(payload["group_results"]):
        yield evidence.record_bytes(record) + b"\n"


@dataclass
class EvidenceCheck:
    """The answer for an export: `ok`, and what did not match, by node."""

    ok: bool
    detail: str
    checked: int = 0
    mismatched: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)


def _label(record: Any) -> str:
    if isinstance(record, dict) and isinstance(record.get("node"), str):
        return f"node {record['node']}"
    if isinstance(record, dict) and isinstance(record.get("group_result"), int):
        return f"group result {record['group_result']}"
    return ""


def evidence_verify(*, lines: Iterable[bytes], digests: dict[str, str], payload_sha256: str = "") -> EvidenceCheck:
    """Check an export line by line against the sealed digests (seal.sealed_digests of the payload)."""
    check = EvidenceCheck(ok=False, detail="")
    seen: set[str] = set()
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip(b"\r\n")
        if len(line) > LINE_MAX:
            return EvidenceCheck(False, f"line {number} is longer than {LINE_MAX // 1024**2} MiB")
        try:
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return EvidenceCheck(False, f"line {number} is not JSON ({exc})")
        if number == 1:
            why = _header_problem(record, payload_sha256)
            if why:
                return EvidenceCheck(False, why)
            continue
        _check_record(check, seen, record, line, digests, number)
    check.missing = [label for label in digests if label not in seen]
    check.ok = not (check.mismatched or check.missing or check.unexpected) and bool(seen or not digests)
    check.detail = _detail(check)
    return check


def _header_problem(header: Any, payload_sha256: str) -> str:
    if not isinstance(header, dict) or header.get("format") != evidence.FORMAT:
        return f"the first line is not a {evidence.FORMAT} header"
    if payload_sha256 and header.get("payload_sha256") != payload_sha256:
        return f"the export is of another certificate (payload sha256 {header.get('payload_sha256')})"
    return ""


def _check_record(
    check: EvidenceCheck, seen: set[str], record: Any, line: bytes, digests: dict[str, str], number: int
) -> None:
    label = _label(record) or f"line {number}"
    if label not in digests or label in seen:
        check.unexpected.append(label)
        return
    seen.add(label)
    check.checked += 1
    actual = seal.sha256_hex(line)
    if actual != digests[label]:
        actual = seal.sha256_hex(seal.canonical_bytes(record))  # re-serialised by some tool?
    if actual != digests[label]:
        check.mismatched.append(label)


def _detail(check: EvidenceCheck) -> str:
    if check.ok:
        return f"the evidence of all {check.checked} nodes and group results matches the sealed digests"
    parts = []
    for what, labels in (
        ("does not match its sealed digest", check.mismatched),
        ("is missing from the export", check.missing),
        ("is not in the certificate (or repeated)", check.unexpected),
    ):
        if labels:
            shown = ", ".join(labels[:10]) + (f" and {len(labels) - 10} more" if len(labels) > 10 else "")
            parts.append(f"the evidence of {shown} {what}")
    return "; ".join(parts) or "the export holds no evidence"
