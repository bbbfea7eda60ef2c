"""The capacity page's figures (chart family "capacity"): cluster power over the soak against the UPS,
peak current per PDU phase against 80% of its breaker, and the liquid's share of the heat per loop.
Pure: plain data from portal/charts/selectors/capacity.py in, plotly figure JSON out. Names come from
the facility model (user input): they are escaped wherever plotly renders text as HTML."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from portal.charts.figures.common import _AXIS, BADGE_HEX, THRESHOLD_COLOUR, _escape, _json, _new

if TYPE_CHECKING:
    from portal.charts.selectors.capacity import CapacityData, Curve, Subject

# Same mapping as portal.runs.models.STATUS_COLOURS (the builders stay pure); "" = no verdict recorded.
_STATUS_HEX = {"pass": "green", "warn": "orange", "fail": "red", "error": "purple"}
LINE_COLOUR = "#0969da"


def status_hex(status: str) -> str:
    return BADGE_HEX[_STATUS_HEX.get(status, "grey")]


def _kw(values: list[float | None]) -> list[float | None]:
    return [v / 1000 if v is not None else None for v in values]


def _summed(curves: list[Curve]) -> list[float | None]:
    """The time-aligned sum of rack curves (they share the soak's time base); None where one has none."""
    out: list[float | None] = []
    for points in zip(*(c.y for c in curves), strict=False):
        out.append(None if any(p is None for p in points) else sum(p for p in points if p is not None))
    return out


def _ups_line(fig: go.Figure, y_kw: float, text: str, dash: str) -> None:
    fig.add_hline(
        y=y_kw,
        line={"color": THRESHOLD_COLOUR, "dash": dash, "width": 2},
        annotation={"text": text, "font": {"color": THRESHOLD_COLOUR}, "bgcolor": "rgba(255,255,255,0.8)"},
        annotation_position="top left",
    )


def ups_limits(ups: Subject) -> tuple[float | None, float | None, float | None]:
    """(capacity W, the most the peak may be W = capacity / margin, the margin) of one UPS. The margin
    is what its judgement used: the required capacity (its threshold) over the peak it carried."""
    capacity, required, peak = ups.value("capacity"), ups.limit("capacity"), ups.value("load")
    if capacity is None or required is None or not peak:
        return capacity, None, None
    # The threshold is written to the watt: to 3 decimals the ratio is the configured margin (1.2).
    margin = round(required / peak, 3)
    return capacity, capacity / margin, margin


def cluster_power_figure(data: CapacityData) -> dict[str, Any] | None:
    """Cluster power over the soak (kW), each UPS's capacity (solid) and the most its peak may be
    (dashed: capacity / margin). A UPS that carries only some racks gets its own load curve."""
    if data.cluster_power is None or not data.cluster_power.x:
        return None
    fig = _new(
        title={"text": "Cluster power during the soak"},
        xaxis={**_AXIS, "title": {"text": "time since the soak began (s)"}},
        yaxis={**_AXIS, "title": {"text": "power (kW)"}, "rangemode": "tozero"},
        height=420,
        showlegend=True,
        legend={"orientation": "h", "y": -0.2},
    )
    x = data.cluster_power.x
    fig.add_trace(go.Scatter(x=x, y=_kw(data.cluster_power.y), mode="lines", name="cluster power",
                             line={"color": LINE_COLOUR, "width": 2}))  # fmt: skip
    everything = set(data.rack_power)
    for ups in data.of("ups"):
        name = _escape(ups.key[0])
        racks = [r for r in ups.label("rack").split(",") if r]
        curves = [data.rack_power[r] for r in racks if r in data.rack_power]
        if curves and set(racks) != everything and len(curves) == len(racks):
            fig.add_trace(go.Scatter(x=curves[0].x, y=_kw(_summed(curves)), mode="lines", name=f"load of UPS {name}"))
        capacity, most, margin = ups_limits(ups)
        if capacity is not None:
            _ups_line(fig, capacity / 1000, f"UPS {name} capacity {capacity / 1000:.1f} kW", "solid")
        if most is not None and margin is not None:
            said = f"UPS {name}: peak at most {most / 1000:.1f} kW (capacity / {margin:.3g})"
            _ups_line(fig, most / 1000, said, "dash")
    return _json(fig)


def _phase_label(phase: Subject) -> str:
    number = phase.key[1] if len(phase.key) > 1 else ""
    return f"L{number}" if number else "?"


def phase_figure(data: CapacityData) -> dict[str, Any] | None:
    """Peak current per PDU phase (bars, coloured by the phase's verdict, with the number on each),
    and the continuous-load limit of each (80% of its breaker) as a red mark on its bar."""
    phases = [p for p in data.of("pdu_phase") if p.value("current") is not None]
    if not phases:
        return None
    x = [[_escape(p.key[0]) for p in phases], [_phase_label(p) for p in phases]]
    peaks = [p.value("current") for p in phases]
    limits = [p.limit("current") for p in phases]
    hover = [
        f"PDU {_escape(p.key[0])} phase {_escape(_phase_label(p))}: {peak:.1f} A"
        + (f", limit {limit:.1f} A" if limit is not None else ", no limit judged")
        + f" ({p.status or 'no verdict'})"
        for p, peak, limit in zip(phases, peaks, limits, strict=True)
        if peak is not None
    ]
    fig = _new(
        title={"text": "Peak current per PDU phase"},
        xaxis={**_AXIS, "type": "multicategory"},
        yaxis={**_AXIS, "title": {"text": "peak current (A)"}, "rangemode": "tozero"},
        height=440,
        showlegend=True,
        legend={"orientation": "h", "y": -0.25},
        bargap=0.25,
    )
    fig.add_trace(
        go.Bar(x=x, y=peaks, name="peak current", marker_color=[status_hex(p.status) for p in phases],
               text=[f"{v:.1f} A" for v in peaks if v is not None], textposition="outside", hovertext=hover,
               hovertemplate="%{hovertext}<extra></extra>")
    )  # fmt: skip
    if any(limit is not None for limit in limits):
        fig.add_trace(
            go.Scatter(x=x, y=limits, mode="markers", name="limit: 80% of the breaker",
                       marker={"symbol": "line-ew-open", "size": 28, "color": THRESHOLD_COLOUR,
                               "line": {"width": 3, "color": THRESHOLD_COLOUR}}, hoverinfo="skip")
        )  # fmt: skip
    return _json(fig)


def capture_figure(data: CapacityData) -> dict[str, Any] | None:
    """Each loop's share of the nodes' heat carried by the liquid (%), against its minimum (80% for DLC)."""
    loops = [loop for loop in data.of("loop") if loop.value("capture") is not None]
    if not loops:
        return None
    names = [_escape(loop.key[0]) for loop in loops]
    ratios = [100 * (loop.value("capture") or 0.0) for loop in loops]
    minimums = [m * 100 if (m := loop.limit("capture")) is not None else None for loop in loops]
    fig = _new(
        title={"text": "Heat captured by the liquid per cooling loop"},
        xaxis={**_AXIS, "type": "category"},
        yaxis={**_AXIS, "title": {"text": "heat removed / electrical load (%)"}, "rangemode": "tozero"},
        height=380,
        showlegend=True,
        legend={"orientation": "h", "y": -0.2},
    )
    fig.add_trace(
        go.Bar(x=names, y=ratios, name="captured by the liquid", marker_color=[status_hex(s.status) for s in loops],
               text=[f"{r:.0f}%" for r in ratios], textposition="outside")
    )  # fmt: skip
    if any(m is not None for m in minimums):
        fig.add_trace(
            go.Scatter(x=names, y=minimums, mode="markers", name="minimum (DLC)",
                       marker={"symbol": "line-ew-open", "size": 40, "color": THRESHOLD_COLOUR,
                               "line": {"width": 3, "color": THRESHOLD_COLOUR}})
        )  # fmt: skip
    return _json(fig)


def capacity_figures(data: CapacityData) -> list[dict[str, Any]]:
    """The page's figures as charts.js draws them: [{"div": element id, "figure": figure JSON}]."""
    built = [
        ("capacity-power", cluster_power_figure(data)),
        ("capacity-phases", phase_figure(data)),
        ("capacity-loops", capture_figure(data)),
    ]
    return [{"div": div, "figure": figure} for div, figure in built if figure is not None]
