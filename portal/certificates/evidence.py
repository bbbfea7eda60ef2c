"""The detailed evidence a certificate cites, read in chunks of nodes and digested per node.

A format-3 certificate body carries per node a summary and `evidence_sha256`: the SHA-256 of the
canonical JSON (seal.py) of that node's detailed evidence record. The records themselves stay in the
database (cited results cannot change: immutability.py) and are exported as JSON lines
(export.py); anyone can hash a record and compare it with the sealed digest.

A node's record: {"node": HOSTNAME, "results": [RESULT, ...]} in plan order, where RESULT holds the
result's identity, verdict, command, times, digests of its raw output, its measurements and its
series (as rows under the column names below, values already canonical: floats as strings).
A group result's record is {"group_result": ID, "item_key", "node_set", "attribution", **RESULT}."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from portal.certificates import seal
from portal.runs.models import CheckResult, Measurement, Series, points_digest

FORMAT = "kiln-evidence/1"
MEASUREMENT_COLUMNS = ("name", "value", "text", "unit", "gpu", "threshold", "ok", "labels")
SERIES_COLUMNS = ("name", "unit", "x_unit", "gpu", "labels", "points_sha256")
RESULT_FIELDS = (
    "id", "run_id", "item_key", "kind", "status", "reason", "node_set", "attribution", "command", "exit_code",
    "stdout_sha256", "stderr_sha256", "output_truncated", "started_at", "finished_at",
)  # fmt: skip
CHUNK = 500  # results per query


def _iso(value: Any) -> str | None:
    return value.isoformat() if value else None


def _chunks(ids: list[int], size: int = CHUNK) -> Iterator[list[int]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


@dataclass
class Loaded:
    """A chunk of cited results: rows by id, measurement rows and series rows by result id."""

    results: dict[int, dict[str, Any]] = field(default_factory=dict)
    measurements: dict[int, list[list[Any]]] = field(default_factory=dict)
    series: dict[int, list[list[Any]]] = field(default_factory=dict)

    def record(self, rid: int) -> dict[str, Any]:
        """One result's detailed evidence, canonical already (no floats left)."""
        r = self.results[rid]
        return {
            "result_id": rid,
            "run_id": r["run_id"],
            "item_key": r["item_key"],
            "kind": r["kind"],
            "status": r["status"],
            "reason": r["reason"],
            "command": r["command"],
            "exit_code": r["exit_code"],
            "started_at": _iso(r["started_at"]),
            "finished_at": _iso(r["finished_at"]),
            "stdout_sha256": r["stdout_sha256"],
            "stderr_sha256": r["stderr_sha256"],
            "output_truncated": r["output_truncated"],
            "measurements": self.measurements.get(rid, []),
            "series": self.series.get(rid, []),
        }


def load(*, result_ids: list[int]) -> Loaded:
    """The results, their measurements and their series digests: three queries per CHUNK results,
    tuples rather than model objects (a million measurements at 12,500 nodes)."""
    out = Loaded()
    for chunk in _chunks(sorted(result_ids)):
        _load_results(chunk, out)
        rows = (
            Measurement.objects.filter(result_id__in=chunk)
            .order_by("result_id", "gpu", "name", "id")
            .values_list("result_id", *MEASUREMENT_COLUMNS)
        )
        for rid, name, value, text, unit, gpu, threshold, ok, labels in rows.iterator(chunk_size=5000):
            value = seal.canonical(value) if value is not None else None
            out.measurements.setdefault(rid, []).append(
                [name, value, text, unit, gpu, threshold, ok, seal.canonical(labels) if labels else {}]
            )
        _load_series(chunk, out)
    return out


def _load_results(chunk: list[int], out: Loaded) -> None:
    """Result rows without their output text; an output recorded before Kiln kept raw bytes has no
    stored digest, and then its UTF-8 text is hashed (what certificates cited before)."""
    for r in CheckResult.objects.filter(pk__in=chunk).values(*RESULT_FIELDS):
        out.results[r["id"]] = dict(r)
    unhashed = Q(stdout_sha256="") | Q(stderr_sha256="")
    for rid, stdout, stderr in CheckResult.objects.filter(unhashed, pk__in=chunk).values_list("id", "stdout", "stderr"):
        row = out.results[rid]
        row["stdout_sha256"] = row["stdout_sha256"] or seal.sha256_hex(stdout)
        row["stderr_sha256"] = row["stderr_sha256"] or seal.sha256_hex(stderr)


def _load_series(chunk: list[int], out: Loaded) -> None:
    """Points are cited by the digest taken when they were stored (older series are hashed now)."""
    unhashed: dict[int, list[Any]] = {}
    rows = Series.objects.filter(result_id__in=chunk).order_by("result_id", "name", "gpu", "id")
    for pk, rid, name, unit, x_unit, gpu, labels, digest in rows.values_list("id", "result_id", *SERIES_COLUMNS):
        row = [name, unit, x_unit, gpu, seal.canonical(labels) if labels else {}, digest]
        out.series.setdefault(rid, []).append(row)
        if not digest:
            unhashed[pk] = row
    for stored in Series.objects.filter(pk__in=list(unhashed)).only("id", "x_packed", "y_packed"):
        unhashed[stored.pk][-1] = points_digest(stored.x, stored.y)


def node_record(hostname: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """A node's record: its results by plan item key (then id), whatever order they were read in."""
    return {"node": hostname, "results": sorted(records, key=lambda r: (r["item_key"], r["result_id"]))}


def group_record(loaded: Loaded, rid: int) -> dict[str, Any]:
    r = loaded.results[rid]
    return {
        "group_result": rid,
        "node_set": r["node_set"],
        "attribution": seal.canonical(r["attribution"] or {}),
        **loaded.record(rid),
    }


def record_bytes(record: dict[str, Any]) -> bytes:
    """Canonical bytes of a record built here (its values are canonical already, so the C encoder
    alone is enough; seal.canonical_bytes would give the same bytes, slower)."""
    return seal.plain_bytes(record)


def digest(record: dict[str, Any]) -> str:
    return seal.sha256_hex(record_bytes(record))
