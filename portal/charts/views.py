"""Chart pages and figure endpoints. Thin: selectors read, figures build, views adapt HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.core.cache import cache
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render

from checks import presented
from portal.charts import figures, selectors
from portal.charts.families import family_of
from portal.inventory.models import Cluster
from portal.roles import VIEWER, role_required
from portal.runs.models import ACTIVE_STATUSES, STATUS_COLOURS, CheckResult, Run


def _fleet_defaults() -> tuple[tuple[str, str], ...]:
    """The distribution page's default metrics, (name, phase) in order of preference: the key
    metrics the check kinds mark `fleet_default` (checks/core/presentation.py), in the kinds' rank order."""
    out: list[tuple[str, str]] = []
    for _, shown in presented():
        for km in shown.key_metrics:
            pick = (km.name, dict(km.labels).get("phase", ""))
            if km.fleet_default and pick not in out:
                out.append(pick)
    return tuple(out)


KEY_METRICS = _fleet_defaults()


def _result(result_id: int) -> CheckResult:
    return get_object_or_404(CheckResult.objects.select_related("run", "node"), pk=result_id)


def _run(run_id: int) -> Run:
    return get_object_or_404(Run.objects.select_related("cluster"), pk=run_id)


def result_figure_data(result: CheckResult) -> dict[str, Any]:
    """The figure JSON of one result. A finished result never changes, so its (downsampled)
    figure is cached: a 24 h burn-in is read and downsampled once."""
    family = family_of(result)
    build = family.figure if family is not None else None
    if build is None:
        raise Http404("no chart for this kind of result")
    finished = result.finished_at if result.status not in ACTIVE_STATUSES else None
    final = finished is not None
    key = f"kiln:chart:{result.pk}:{finished.timestamp() if finished is not None else ''}:{selectors.MAX_POINTS}"
    if final and (hit := cache.get(key)) is not None:
        return hit
    figure = build(result)
    if final:
        cache.set(key, figure, timeout=24 * 3600)
    return figure


@role_required(VIEWER)
def result_figure(request: HttpRequest, result_id: int) -> JsonResponse:
    return JsonResponse(result_figure_data(_result(result_id)))


@role_required(VIEWER)
def result_ecc(request: HttpRequest, result_id: int) -> HttpResponse:
    result = _result(result_id)
    if selectors.in_ecc_table(result.kind) is None:
        raise Http404("not an ECC/Xid result")
    return render(request, "charts/_ecc_table.html", {"result": result, "ecc": selectors.ecc_result(result=result)})


def _filename(result: CheckResult, ext: str) -> str:
    return f"kiln-run{result.run_id}-{result.node.hostname}-{result.item_key}-series.{ext}"


@role_required(VIEWER)
def series_csv(request: HttpRequest, result_id: int) -> StreamingHttpResponse:
    """Every stored point, streamed (no downsampling)."""
    result = _result(result_id)
    response = StreamingHttpResponse(selectors.series_csv_lines(result=result), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{_filename(result, "csv")}"'
    return response


def _json_stream(result: CheckResult) -> Iterator[str]:
    head = {"result": result.pk, "check": result.item_key, "kind": result.kind, "node": result.node.hostname}
    yield json.dumps(head)[:-1] + ', "series": ['
    for i, s in enumerate(selectors.result_series(result=result)):
        row = {"name": s.name, "unit": s.unit, "x_unit": s.x_unit, "gpu": s.gpu, "labels": s.labels or {}}
        yield ("," if i else "") + json.dumps({**row, "x": s.x, "y": s.y})
    yield "]}"


@role_required(VIEWER)
def series_json(request: HttpRequest, result_id: int) -> StreamingHttpResponse:
    """Every stored point as JSON, streamed one series at a time."""
    result = _result(result_id)
    response = StreamingHttpResponse(_json_stream(result), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{_filename(result, "json")}"'
    return response


def _page(request: HttpRequest, run: Run, title: str, figure: dict[str, Any] | None, **extra: Any) -> HttpResponse:
    context = {"run": run, "title": title, "figure": figure, "links": selectors.run_chart_links(run=run), **extra}
    return render(request, "charts/run_chart.html", context)


@role_required(VIEWER)
def run_links(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run page's chart links, loaded once after the page (htmx): only kinds with data."""
    run = _run(run_id)
    return render(request, "charts/_run_links_list.html", {"run": run, "links": selectors.run_chart_links(run=run)})


@role_required(VIEWER)
def run_filesystem_figure(request: HttpRequest, run_id: int) -> JsonResponse:
    return JsonResponse(figures.fs_figure(selectors.run_filesystem(run=_run(run_id))))


@role_required(VIEWER)
def run_filesystem(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(run_id)
    data = selectors.run_filesystem(run=run)
    figure = figures.fs_figure(data) if data.nodes or data.has_aggregate else None
    return _page(request, run, "Filesystem throughput", figure, empty="No filesystem results in this run.")


@role_required(VIEWER)
def run_nccl(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(run_id)
    item_key = request.GET.get("check", "")
    data = selectors.nccl_run(run=run, item_key=item_key)
    figure = figures.nccl_figure(data) if data.curves else None
    return _page(request, run, f"NCCL busbw ({item_key})", figure, empty="No busbw series for this check in this run.")


def _choice(request: HttpRequest, choices: list[selectors.MetricChoice]) -> selectors.MetricChoice | None:
    """The metric asked for (?pick=check|metric|phase, or ?check=&metric=&phase=), else a key metric."""
    if pick := request.GET.get("pick"):
        check, _, rest = pick.partition("|")
        metric, _, phase = rest.partition("|")
    else:
        check, metric, phase = (request.GET.get(k, "") for k in ("check", "metric", "phase"))
    for c in choices:
        if (c.item_key, c.name) == (check, metric) and (not phase or c.phase == phase):
            return c
    if check or metric:
        return None
    for name, phase in KEY_METRICS:
        for c in choices:
            if (c.name, c.phase) == (name, phase):
                return c
    return choices[0] if choices else None


@role_required(VIEWER)
def run_distribution(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(run_id)
    choices = selectors.run_metric_choices(run=run)
    choice = _choice(request, choices)
    per = "gpu" if request.GET.get("per") == "gpu" else "node"
    dist = figure = None
    if choice is not None:
        dist = selectors.run_distribution(
            run=run, item_key=choice.item_key, metric=choice.name, phase=choice.phase, per=per
        )
        figure = figures.distribution_figure(dist) if dist.points else None
    return _page(
        request,
        run,
        "Fleet distribution",
        figure,
        choices=choices,
        choice=choice,
        per=per,
        dist=dist,
        picker=True,
        empty="No such metric in this run." if choices else "No numeric measurements in this run yet.",
    )


@role_required(VIEWER)
def run_rack(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(run_id)
    metric = request.GET.get("metric") or "status"
    choices = selectors.run_metric_choices(run=run)
    valid = {"status"} | {c.metric_key for c in choices}
    if metric not in valid:
        metric = "status"
    data = selectors.run_rack(run=run, metric=metric)
    figure = figures.rack_figure(data, higher_is_better=data.higher_is_better) if data.cells else None
    return _page(
        request,
        run,
        "Rack heatmap",
        figure,
        rack_choices=choices,
        metric=metric,
        empty="No nodes in this run.",
    )


# Where the capacity page finds rack positions (room, row, position); the facility app's when it has them.
RACK_POSITIONS: selectors.RackPositions = selectors.facility_rack_positions


@role_required(VIEWER)
def cluster_capacity(request: HttpRequest, name: str) -> HttpResponse:
    """The cluster's power and cooling capacity from its latest finished soak, or ?result=ID (one of
    this cluster's)."""
    cluster = get_object_or_404(Cluster, name=name)
    asked = request.GET.get("result", "")
    if asked and not (asked.isdecimal() and len(asked) <= 18):  # an id, within a bigint
        raise Http404("no such power and cooling result on this cluster")
    try:
        result = selectors.capacity_result(cluster=cluster, result_id=int(asked) if asked else None)
    except CheckResult.DoesNotExist:
        raise Http404("no such power and cooling result on this cluster") from None
    data = selectors.capacity_data(result=result, cluster=cluster, positions=RACK_POSITIONS) if result else None
    charts = figures.capacity_figures(data) if data else []
    context = {
        "cluster": cluster,
        "data": data,
        "charts": charts,
        "drawn": [c["div"] for c in charts],
        "choices": selectors.capacity_results(cluster=cluster) if data else [],
        "plans": [] if data else selectors.capacity_plans(),
        "colours": STATUS_COLOURS,
    }
    return render(request, "charts/capacity.html", context)


def plotly_js(request: HttpRequest) -> FileResponse:
    """plotly.js from the installed plotly package: air-gapped sites load nothing from a CDN, and the
    JS always matches the Python figure builder's version."""
    from pathlib import Path

    import plotly

    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    response = FileResponse(path.open("rb"), content_type="application/javascript")
    response["Cache-Control"] = f"private, max-age={7 * 24 * 3600}"
    return response
