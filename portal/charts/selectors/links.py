"""The run page's chart links and the whole-series exports of a result."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from checks import kinds_charted, presentation_of
from portal.runs.models import CheckResult, Measurement, Run, Series


@dataclass
class RunChartLink:
    label: str
    url: str


def run_chart_links(*, run: Run) -> list[RunChartLink]:
    """Links to the run-level charts that have data in this run: one query."""
    from django.urls import reverse

    curves = {kind: presentation_of(kind).curves for kind in kinds_charted("nccl")}
    kinds = {
        item_key: kind
        for item_key, kind, name in Series.objects.filter(result__run=run, result__kind__in=list(curves))
        .values_list("result__item_key", "result__kind", "name")
        .distinct()
        if name == curves[kind]
    }
    fs = Measurement.objects.filter(result__run=run, result__kind__in=kinds_charted("filesystem")).exists()
    links = [
        RunChartLink(f"NCCL busbw ({key})", reverse("charts:run_nccl", args=[run.pk]) + f"?check={key}")
        for key in sorted(kinds)
    ]
    if fs:
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
