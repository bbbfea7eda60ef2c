"""Static chart images for the PDF: plotly figures exported to SVG by kaleido with the system Chromium.

Optional and time-bounded: with no Chromium, with KILN_CERT_CHARTS=0, or past the time budget, the
PDF renders without them and says so. Charts are illustrations of evidence already in the payload
(series are covered by their hashes), so they are not part of what is signed."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from portal.runs.models import Measurement, Series

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


def browser_path() -> str | None:
    """BROWSER_PATH when set, else a Chromium on PATH (Debian: /usr/bin/chromium)."""
    from django.conf import settings

    configured = str(settings.BROWSER_PATH or "")
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


def _export(figures: list[tuple[str, Any]]) -> list[Chart]:
    global _server_started
    import kaleido

    with _lock:
        if not _server_started:
            # One sync server for the process: ~0.1 s per figure after the first.
            kaleido.start_sync_server(silence_warnings=True)
            _server_started = True
            atexit.register(_stop)
        return [
            Chart(title, kaleido.calc_fig_sync(fig, opts={"format": "svg", "width": 900, "height": 360}))
            for title, fig in figures
        ]


def figures_build(*, result_ids: list[int], items: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """The key charts: NCCL bus bandwidth by message size (every node, with the threshold), burn-in
    Gflop/s per GPU, and filesystem throughput per node. Two queries."""
    import plotly.graph_objects as go

    kinds = {item["key"]: item for item in items}
    figures: list[tuple[str, Any]] = []
    curves = list(
        Series.objects.filter(result_id__in=result_ids, name="busbw", result__kind="nccl_allreduce")
        .order_by("result__node__hostname")
        .values("result__node__hostname", "result__item_key", "x", "y")
    )
    if curves:
        fig = go.Figure()
        for c in curves:
            fig.add_trace(go.Scatter(x=c["x"], y=c["y"], mode="lines", name=c["result__node__hostname"]))
        threshold = kinds.get(curves[0]["result__item_key"], {}).get("thresholds", {}).get("min_busbw_gbps")
        if threshold:
            fig.add_hline(y=float(threshold), line_dash="dash", line_color="red", annotation_text="threshold")
        fig.update_layout(xaxis_type="log", xaxis_title="message size (B)", yaxis_title="busbw (GB/s)")
        figures.append(("NCCL all-reduce bus bandwidth by message size", fig))
    values = list(
        Measurement.objects.filter(
            result_id__in=result_ids, name__in=["gflops", "write_bw", "read_bw"], value__isnull=False
        )
        .order_by("result__node__hostname", "gpu")
        .values("result__node__hostname", "result__kind", "name", "gpu", "value")
    )
    gflops = [v for v in values if v["name"] == "gflops" and v["result__kind"] == "burn_in"]
    if gflops:
        fig = go.Figure(
            go.Bar(x=[f"{v['result__node__hostname']}/{v['gpu']}" for v in gflops], y=[v["value"] for v in gflops])
        )
        fig.update_layout(xaxis_title="node/GPU", yaxis_title="Gflop/s")
        figures.append(("Burn-in throughput per GPU", fig))
    fs = [v for v in values if v["result__kind"] == "fs_throughput"]
    if fs:
        fig = go.Figure()
        for name in ("write_bw", "read_bw"):
            # value is never None (filtered above); the row type cannot say so
            bars = [
                (v["result__node__hostname"], v["value"] / 1e9)
                for v in fs
                if v["name"] == name and v["value"] is not None
            ]
            fig.add_trace(go.Bar(x=[host for host, _ in bars], y=[gb for _, gb in bars], name=name))
        fig.update_layout(barmode="group", yaxis_title="GB/s")
        figures.append(("Filesystem throughput per node", fig))
    for _, fig in figures:
        fig.update_layout(template="plotly_white", margin={"l": 60, "r": 20, "t": 20, "b": 60})
    return figures


def charts_render(*, result_ids: list[int], items: list[dict[str, Any]]) -> tuple[list[Chart], str]:
    """(charts, note). The note says why charts were left out, or is empty."""
    from django.conf import settings

    if str(settings.KILN_CERT_CHARTS).strip().lower() in ("0", "false", "no", "off", ""):
        return [], "Charts were left out: chart rendering is turned off (KILN_CERT_CHARTS=0)."
    browser = browser_path()
    if browser is None:
        return [], "Charts were left out: no Chromium was found to render them (set BROWSER_PATH)."
    os.environ.setdefault("BROWSER_PATH", browser)  # kaleido finds Chromium through the environment
    figures = figures_build(result_ids=result_ids, items=items)
    if not figures:
        return [], "No chart: the cited checks recorded no curve to draw."
    timeout = float(settings.KILN_CERT_CHART_TIMEOUT_S)
    future = _pool.submit(_export, figures)
    try:
        return future.result(timeout=timeout), ""
    except FutureTimeout:
        logger.warning("certificate charts: kaleido took more than %ss; left out", timeout)
        return [], f"Charts were left out: rendering took more than {timeout:g} s."
    except Exception as exc:  # a chart must never stop a certificate
        logger.warning("certificate charts failed: %s", exc)
        return [], f"Charts were left out: rendering failed ({type(exc).__name__})."
