"""Result lists as CSV or JSON, streamed row by row: an export of a million results never sits whole
in memory, and the database is read in chunks (QuerySet.iterator)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from django.urls import reverse

from portal.runs.models import CheckResult, Measurement, Run, Scope

CHUNK = 2000
RESULT_FIELDS = [
    "result_id", "run_id", "cluster", "node", "scope", "launcher", "check", "kind", "status", "reason",
    "attempt", "exit_code", "started_at", "finished_at", "duration_s", "attribution", "url",
]  # fmt: skip
MEASUREMENT_FIELDS = [
    "run_id", "result_id", "node", "scope", "check", "kind", "result_status", "name", "gpu", "value", "text",
    "unit", "threshold", "ok", "labels",
]  # fmt: skip


class _Echo:
    """csv.writer wants a file; this one hands each written line back."""

    def write(self, value: str) -> str:
        return value


def _cell(value: Any) -> Any:
    """Text that a spreadsheet would run as a formula (=, +, -, @) is quoted with a leading apostrophe:
    reasons and tool output come from the nodes, and a CSV is opened in Excel."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def result_row(r: CheckResult) -> dict[str, Any]:
    group = r.scope == Scope.GROUP
    return {
        "result_id": r.pk,
        "run_id": r.run_id,
        "cluster": r.run.cluster.name,
        "node": r.node_set if group else r.node.hostname,
        "scope": r.scope,
        "launcher": r.node.hostname if group else "",
        "check": r.item_key,
        "kind": r.kind,
        "status": r.status,
        "reason": r.reason,
        "attempt": r.attempt,
        "exit_code": r.exit_code,
        "started_at": _iso(r.started_at),
        "finished_at": _iso(r.finished_at),
        "duration_s": r.duration_s,
        "attribution": r.attribution if group and r.attribution else None,
        "url": reverse("runs:result_detail", args=[r.pk]),
    }


def _csv_lines(header: list[str], rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(header)
    for row in rows:
        yield writer.writerow(
            [_cell(json.dumps(v) if isinstance(v, dict | list) else ("" if v is None else v)) for v in row.values()]
        )


def _json_lines(key: str, meta: dict[str, Any], rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """One JSON document, {**meta, key: [...]}, written a row at a time."""
    head = json.dumps(meta)[:-1]
    yield (head + ", " if meta else "{") + json.dumps(key) + ": ["
    first = True
    for row in rows:
        yield ("\n" if first else ",\n") + json.dumps(row)
        first = False
    yield "\n]}\n"


def _response(lines: Iterator[str], *, content_type: str, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(lines, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def results_export(
    *, results: QuerySet[CheckResult], fmt: str, filename: str, meta: dict[str, Any] | None = None
) -> StreamingHttpResponse:
    """A result list (any filtered queryset) as CSV or JSON; one query per CHUNK rows."""
    qs = results.select_related("run", "run__cluster", "node").only(
        "id", "run_id", "node_id", "scope", "node_set", "item_key", "kind", "status", "reason", "attempt",
        "exit_code", "started_at", "finished_at", "duration_s", "attribution", "run__cluster__name",
        "node__hostname",
    )  # fmt: skip
    rows = (result_row(r) for r in qs.iterator(chunk_size=CHUNK))
    if fmt == "csv":
        return _response(_csv_lines(RESULT_FIELDS, rows), content_type="text/csv", filename=f"{filename}.csv")
    return _response(
        _json_lines("results", meta or {}, rows), content_type="application/json", filename=f"{filename}.json"
    )


def measurements_export(*, run: Run) -> StreamingHttpResponse:
    """Every measurement of a run, flattened: one row per measurement with its result's identity."""
    rows_qs = (
        Measurement.objects.filter(result__run=run)
        .values_list(
            "result_id",
            "result__node__hostname",
            "result__scope",
            "result__node_set",
            "result__item_key",
            "result__kind",
            "result__status",
            "name",
            "gpu",
            "value",
            "text",
            "unit",
            "threshold",
            "ok",
            "labels",
        )  # fmt: skip
        .order_by("result__node__hostname", "result__position", "result_id", "gpu", "name", "id")
    )

    def rows() -> Iterator[dict[str, Any]]:
        for (
            rid,
            host,
            scope,
            node_set,
            item_key,
            kind,
            status,
            name,
            gpu,
            value,
            text,
            unit,
            thr,
            ok,
            labels,
        ) in rows_qs.iterator(chunk_size=CHUNK):
            yield dict(
                zip(
                    MEASUREMENT_FIELDS,
                    [
                        run.pk, rid, node_set if scope == Scope.GROUP else host, scope, item_key, kind, status, name,
                        gpu, value, text, unit, thr, ok, labels or None,
                    ],
                    strict=True,
                )
            )  # fmt: skip

    return _response(
        _csv_lines(MEASUREMENT_FIELDS, rows()), content_type="text/csv", filename=f"kiln-run-{run.pk}-measurements.csv"
    )
