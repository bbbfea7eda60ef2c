"""Static chart images for the PDF: plotly figures exported to SVG by kaleido with the system Chromium.

Optional and time-bounded: with no Chromium, with KILN_CERT_CHARTS=0, or past the time budget, the
PDF renders without them and says so. Charts are illustrations of evidence already in the payload
(series are covered by their hashes), so they are not part of what is signed."""

from __future__ import annotations

import atexit
import logging
import math
import os
import shutil
import statistics
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from checks import presentation_of, presented
from checks.core.presentation import CertificateChart
from portal import formatting
from portal.runs.models import CheckResult, Measurement, Scope, Series
from portal.runs.packing import unpack, unpack_pair

logger = logging.getLogger(__name__)
# kaleido and choreographer log every tab and temp dir at INFO (and again at interpreter exit).
for _name in ("kaleido", "choreographer", "logistro"):
    logging.getLogger(_name).setLevel(logging.WARNING)
_lock = threading.Lock()
_server_started = False
_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kiln-kaleido")


@dataclass
class Chart:
    title: str
    svg: bytes
    section: int | None = None  # the result id of the certificate section it belongs to (sections.py)


def _setting(name: str, default: str) -> str:
    from django.conf import settings

    value = getattr(settings, name, None)
    return str(value) if value is not None else os.environ.get(name, default)


def browser_path() -> str | None:
    """settings.BROWSER_PATH when set, else a Chromium on PATH (Debian: /usr/bin/chromium)."""
    configured = _setting("BROWSER_PATH", "")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _stop() -> None:
    import kaleido

    try:
        kaleido.stop_sync_server(silence_warnings=True)
    except Exception:  # best effort at interpreter exit
        pass


def _export(figures: list[tuple[str, Any]], sections: list[int | None] | None = None) -> list[Chart]:
    global _server_started
    import kaleido

    with _lock:
        if not _server_started:
            # One sync server for the process: ~0.1 s per figure after the first.
            kaleido.start_sync_server(silence_warnings=True)
            _server_started = True
            atexit.register(_stop)
        owners = sections or [None] * len(figures)
        return [
            Chart(title, kaleido.calc_fig_sync(fig, opts={"format": "svg", "width": 900, "height": 360}), owner)
            for (title, fig), owner in zip(figures, owners, strict=True)
        ]


def figures_build(*, result_ids: list[int], items: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """The charts each cited check kind declares (checks/core/presentation.py CertificateChart), in the
    kinds' rank order: NCCL bus bandwidth by message size (every node, with the threshold), burn-in
    Gflop/s per GPU, filesystem throughput per node. Two queries."""
    declared = [(kind, chart) for kind, shown in presented() for chart in shown.certificate_charts]
    curve_keys = {(kind, c.names[0]) for kind, c in declared if c.style == "curves"}
    bar_keys = {(kind, name) for kind, c in declared if c.style == "bars" for name in c.names}
    curves = _rows_by_kind_name(
        _with_points(
            Series.objects.filter(_kind_name_q(curve_keys), result_id__in=result_ids)
            .order_by("result__node__hostname")
            .values("result__node__hostname", "result__item_key", "result__kind", "name", *_PACKED)
        )
    )
    values = _rows_by_kind_name(
        Measurement.objects.filter(_kind_name_q(bar_keys), result_id__in=result_ids, value__isnull=False)
        .order_by("result__node__hostname", "gpu")
        .values("result__node__hostname", "result__kind", "name", "gpu", "value")
    )
    thresholds = {item["key"]: item.get("thresholds", {}) for item in items}
    figures: list[tuple[str, Any]] = []
    for kind, chart in declared:
        if chart.style == "curves":
            fig = _curves_figure(chart, curves.get((kind, chart.names[0]), []), thresholds)
        else:
            labels = {name: formatting.name_label(name, presentation_of(kind).label_of(name)) for name in chart.names}
            fig = _bars_figure(chart, {name: values.get((kind, name), []) for name in chart.names}, labels)
        if fig is not None:
            fig.update_layout(template="plotly_white", margin={"l": 60, "r": 20, "t": 20, "b": 60})
            figures.append((chart.title, fig))
    return figures


_PACKED = ("x_packed", "y_packed", "view_packed")


def _capacity_figures(result: CheckResult) -> list[tuple[str, dict[str, Any]]]:
    from portal.charts.figures.capacity import cluster_power_figure, phase_figure
    from portal.charts.selectors.capacity import capacity_data

    data = capacity_data(result=result, cluster=result.run.cluster)
    built = [("Cluster power during the soak, with the UPS", cluster_power_figure(data)),
             ("Peak current per PDU phase, with 80% of its breaker", phase_figure(data))]  # fmt: skip
    return [(title, figure) for title, figure in built if figure is not None]


# Chart family -> the static figures of one result in its certificate section (checks/core/presentation.py
# CertificateSection.figures): the family's own builders (portal/charts/figures).
SECTION_FIGURES: dict[str, Callable[[CheckResult], list[tuple[str, dict[str, Any]]]]] = {
    "capacity": _capacity_figures,
}


def section_figures_build(*, result_ids: list[int]) -> list[tuple[int, str, Any]]:
    """(result id, title, figure) for each cited group result whose kind declares a certificate section
    with figures, drawn by its chart family. One query for the results, then the family's reads per
    sectioned result (one soak per campaign, usually)."""
    import plotly.graph_objects as go

    kinds = [kind for kind, shown in presented() if shown.certificate_section and shown.certificate_section.figures]
    results = CheckResult.objects.filter(pk__in=result_ids, scope=Scope.GROUP, kind__in=kinds)
    out = []
    for result in results.select_related("run__cluster").order_by("id"):
        build = SECTION_FIGURES.get(presentation_of(result.kind).chart)
        for title, figure in build(result) if build is not None else []:
            fig = go.Figure(data=figure["data"], layout=figure["layout"])
            fig.update_layout(title=None, template="plotly_white", margin={"l": 60, "r": 20, "t": 20, "b": 60})
            out.append((result.pk, title, fig))
    return out


def _with_points(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Each row with its points as "x" and "y" lists: the stored downsampled view when there is
    one (a chart draws no more), else every point."""
    for row in rows:
        packed = [row.pop(name) for name in _PACKED]
        x, y = unpack_pair(packed[2]) if packed[2] else (unpack(packed[0]), unpack(packed[1]))
        yield {**row, "x": x, "y": y}


def _kind_name_q(pairs: set[tuple[str, str]]) -> Q:
    """Rows of any of these (result kind, name) pairs; none when there are no pairs."""
    q = Q(pk__in=[])
    for kind, name in sorted(pairs):
        q |= Q(result__kind=kind, name=name)
    return q


def _rows_by_kind_name(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    out: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        out.setdefault((row["result__kind"], row["name"]), []).append(row)
    return out


# Past these counts one trace per node (or one bar per GPU) is unreadable on an A4 page and slow to
# lay out (12,500 SVG lines), so the chart shows the distribution instead: a 900-px plot area
# resolves about 300 bars (3 px each) and about 30 distinguishable lines.
MAX_CURVES = 30
MAX_BARS = 300
HISTOGRAM_BINS = 60  # fine enough to show a straggler apart from the bulk


def _curves_figure(chart: CertificateChart, curves: list[Mapping[str, Any]], thresholds: dict[str, Any]) -> Any:
    import plotly.graph_objects as go

    if not curves:
        return None
    fig = go.Figure()
    if len(curves) > MAX_CURVES:
        _add_envelope(fig, curves)
    else:
        for c in curves:
            fig.add_trace(go.Scatter(x=c["x"], y=c["y"], mode="lines", name=c["result__node__hostname"]))
    threshold = thresholds.get(curves[0]["result__item_key"], {}).get(chart.threshold) if chart.threshold else None
    if threshold:
        fig.add_hline(y=float(threshold), line_dash="dash", line_color="red", annotation_text="threshold")
    fig.update_layout(xaxis_title=chart.x_title, yaxis_title=chart.y_title)
    if chart.log_x:
        fig.update_layout(xaxis_type="log")
    return fig


def envelope(curves: list[Mapping[str, Any]]) -> tuple[list[float], list[float], list[float], list[float]]:
    """(x, lowest, median, highest) over the curves at each x any of them has; NaN and inf skipped."""
    at: dict[float, list[float]] = {}
    for c in curves:
        for x, y in zip(c["x"], c["y"], strict=False):
            if math.isfinite(x) and math.isfinite(y):
                at.setdefault(x, []).append(y)
    xs = sorted(at)
    return xs, [min(at[x]) for x in xs], [statistics.median(at[x]) for x in xs], [max(at[x]) for x in xs]


def _add_envelope(fig: Any, curves: list[Mapping[str, Any]]) -> None:
    """The band from the lowest to the highest node at each x, and the median: constant size at any
    node count; the lowest line is the straggler's."""
    import plotly.graph_objects as go

    xs, low, mid, high = envelope(curves)
    n = len(curves)
    fig.add_trace(go.Scatter(x=xs, y=high, mode="lines", name=f"highest of {n} nodes", line={"width": 1}))
    fig.add_trace(go.Scatter(x=xs, y=low, mode="lines", name=f"lowest of {n} nodes", fill="tonexty", line={"width": 1}))
    fig.add_trace(go.Scatter(x=xs, y=mid, mode="lines", name="median", line={"width": 2}))


# The x axis of an exported chart: 900 px less the 60 + 20 px side margins (figures_build), and
# plotly's default 12-px tick font, whose characters average about 7 px (Open Sans at 12 px).
PLOT_WIDTH_PX = 820
TICK_CHAR_PX = 7.0
TICK_GAP_PX = 16  # between two tick labels, so that they read as two


def bar_ticks(nodes: list[str]) -> tuple[list[float], list[str]]:
    """(tick positions, tick texts) for bars at x = 0, 1, … of the nodes `nodes` (one per bar; a
    node's GPUs side by side): a tick under the middle of each node's bars, labelled with the node;
    only every k-th node when all of their labels would not fit side by side, and none whose label
    would run past the plot's edge (into the y axis's labels), so that labels never collide or need
    turning."""
    runs: list[tuple[int, int]] = []
    for i, node in enumerate(nodes):
        if runs and nodes[runs[-1][0]] == node:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    if not runs:
        return [], []
    widest = max(len(nodes[start]) for start, _ in runs)
    room = max(1, int(PLOT_WIDTH_PX // (widest * TICK_CHAR_PX + TICK_GAP_PX)))
    step = math.ceil(len(runs) / room)
    px_per_bar = PLOT_WIDTH_PX / len(nodes)  # bars span -0.5 … n - 0.5
    values, texts = [], []
    for start, end in runs[::step]:
        centre = (start + end) / 2
        half = len(nodes[start]) * TICK_CHAR_PX / 2
        at = (centre + 0.5) * px_per_bar
        if at - half >= 0 and at + half <= PLOT_WIDTH_PX:
            values.append(centre)
            texts.append(nodes[start])
    return values, texts


def _bars_figure(
    chart: CertificateChart, by_name: dict[str, list[Mapping[str, Any]]], labels: Mapping[str, str] | None = None
) -> Any:
    import plotly.graph_objects as go

    if not any(by_name.values()):
        return None
    if max(len(rows) for rows in by_name.values()) > MAX_BARS:
        return _histogram_figure(chart, by_name, labels)

    # One position per bar (node, or node/GPU) shared by every trace, in node then GPU order, so
    # that grouped traces line up; the axis is labelled per node (bar_ticks).
    def place(row: Mapping[str, Any]) -> tuple[str, int]:
        return row["result__node__hostname"], -1 if row["gpu"] is None else int(row["gpu"])

    places = sorted({place(row) for rows in by_name.values() for row in rows})
    at = {p: i for i, p in enumerate(places)}
    fig = go.Figure()
    for name, rows in by_name.items():
        hover = [host if gpu < 0 else f"{host}/{gpu}" for host, gpu in map(place, rows)]
        x = [at[place(row)] for row in rows]
        bar = go.Bar(x=x, y=[row["value"] / chart.scale for row in rows], hovertext=hover)
        if chart.grouped:
            bar.name = (labels or {}).get(name, name)
        fig.add_trace(bar)
    ticks = bar_ticks([host for host, _ in places])
    if chart.grouped:
        fig.update_layout(barmode="group")
    if chart.x_title:
        fig.update_layout(xaxis_title=chart.x_title)
    fig.update_layout(yaxis_title=chart.y_title)
    fig.update_xaxes(tickmode="array", tickvals=ticks[0], ticktext=ticks[1], tickangle=0)
    return fig


def _histogram_figure(
    chart: CertificateChart, by_name: dict[str, list[Mapping[str, Any]]], labels: Mapping[str, str] | None = None
) -> Any:
    """How many nodes (or GPUs) measured each value: the bars chart past MAX_BARS bars."""
    import plotly.graph_objects as go

    fig = go.Figure()
    per_gpu = any(row["gpu"] is not None for rows in by_name.values() for row in rows)
    for name, rows in by_name.items():
        values = [row["value"] / chart.scale for row in rows if math.isfinite(row["value"])]
        label = (labels or {}).get(name, name)
        fig.add_trace(go.Histogram(x=values, name=f"{label} ({len(values)})", nbinsx=HISTOGRAM_BINS, opacity=0.75))
    fig.update_layout(
        barmode="overlay", showlegend=True, xaxis_title=chart.y_title, yaxis_title="GPUs" if per_gpu else "nodes"
    )
    return fig


def charts_render(*, result_ids: list[int], items: list[dict[str, Any]]) -> tuple[list[Chart], str]:
    """(charts, note). The note says why charts were left out, or is empty."""
    if _setting("KILN_CERT_CHARTS", "1").strip().lower() in ("0", "false", "no", "off"):
        return [], "Charts were left out: chart rendering is turned off (KILN_CERT_CHARTS=0)."
    browser = browser_path()
    if browser is None:
        return [], "Charts were left out: no Chromium was found to render them (set BROWSER_PATH)."
    os.environ.setdefault("BROWSER_PATH", browser)
    figures = figures_build(result_ids=result_ids, items=items)
    sectioned = section_figures_build(result_ids=result_ids)
    if not figures and not sectioned:
        return [], "No chart: the cited checks recorded no curve to draw."
    owners: list[int | None] = [None] * len(figures) + [owner for owner, _, _ in sectioned]
    figures += [(title, fig) for _, title, fig in sectioned]
    timeout = float(_setting("KILN_CERT_CHART_TIMEOUT_S", "60"))
    future = _pool.submit(_export, figures, owners)
    try:
        return future.result(timeout=timeout), ""
    except FutureTimeout:
        logger.warning("certificate charts: kaleido took more than %ss; left out", timeout)
        return [], f"Charts were left out: rendering took more than {timeout:g} s."
    except Exception as exc:  # a chart must never stop a certificate
        logger.warning("certificate charts failed: %s", exc)
        return [], f"Charts were left out: rendering failed ({type(exc).__name__})."
