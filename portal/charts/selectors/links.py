"""The run page's chart links and the whole-series exports of a result."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db.models import Exists

from checks import kinds_charted, presentation_of
from portal.runs.models import CheckResult, Measurement, Run, Series


@dataclass
class RunChartLink:
    label: str
    url: str


def run_chart_links(*, run: Run) -> list[RunChartLink]:
    """Links to the run-level charts that have data in this run: one query, an EXISTS per NCCL
    item of the plan (its curve stored on some node) and one for filesystem numbers, each stopping
    at its first row whatever the node count."""
    from django.urls import reverse

    curves = {kind: presentation_of(kind).curves for kind in kinds_charted("nccl")}
    items = [
        (str(item.get("key")), str(item.get("kind")))
        for item in (run.plan_snapshot or {}).get("items", [])
        if item.get("kind") in curves
    ]
    found = {
        f"nccl{i}": Exists(
            Series.objects.filter(result__run_id=run.pk, result__item_key=key, result__kind=kind, name=curves[kind])
        )
        for i, (key, kind) in enumerate(items)
    }
    fs = Exists(Measurement.objects.filter(result__run_id=run.pk, result__kind__in=kinds_charted("filesystem")))
    has = Run.objects.filter(pk=run.pk).annotate(fs=fs, **found).values("fs", *found).first() or {}
    links = [
        RunChartLink(f"NCCL busbw ({key})", reverse("charts:run_nccl", args=[run.pk]) + f"?check={key}")
        for key in sorted({key for i, (key, _) in enumerate(items) if has.get(f"nccl{i}")})
    ]
    if has.get("fs"):
        links.append(RunChartLink("Filesystem", reverse("charts:run_filesystem", args=[run.pk])))
    links.append(RunChartLink("Fleet distribution", reverse("charts:run_distribution", args=[run.pk])))
    links.append(RunChartLink("Rack heatmap", reverse("charts:run_rack", args=[run.pk])))
    return links


def result_series(*, result: CheckResult) -> Iterator[Series]:
    """Every stored series of a result, whole, one row at a time (exports)."""
    return Series.objects.filter(result=result).order_by("name", "gpu", "id").iterator(chunk_size=8)


def series_csv_lines(*, result: CheckResult) -> Iterator[str]:
    """Long-format CSV, one line per point: series,gpu,labels,x,x_unit,y,unit. Generated lazily so
    a 24 h burn-in streams instead of being built in memory."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(row: Iterable[Any]) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(row)
        return buffer.getvalue()

    yield line(["series", "gpu", "labels", "x", "x_unit", "y", "unit"])
    for s in result_series(result=result):
        labels = ";".join(f"{k}={v}" for k, v in sorted((s.labels or {}).items()))
        gpu = "" if s.gpu is None else s.gpu
        chunk = [
            line([s.name, gpu, labels, x, s.x_unit, "" if y is None else y, s.unit])
            for x, y in zip(s.x, s.y, strict=False)
        ]
        yield "".join(chunk)
