"""Figure builders: plain chart data (portal/charts/selectors dataclasses) -> plotly figure JSON
dicts, drawn in the browser by plotly.js. Pure: no database, no request. One module per chart
family; the shared layout and colours are in common.py."""

from __future__ import annotations

from portal.charts.figures.burn_in import burn_in_figure
from portal.charts.figures.capacity import capacity_figures, cluster_power_figure, phase_figure
from portal.charts.figures.common import (
    BADGE_HEX,
    GPU_COLOURS,
    MAX_LEGEND,
    MAX_THROTTLE_SHAPES,
    STATUS_ORDER,
    THRESHOLD_COLOUR,
    binary_size,
    gpu_colour,
    size_ticks,
)
from portal.charts.figures.dlc import dlc_figure
from portal.charts.figures.filesystem import fs_figure
from portal.charts.figures.fleet import distribution_figure, threshold_value
from portal.charts.figures.matrix import matrix_figure
from portal.charts.figures.nccl import nccl_figure
from portal.charts.figures.rack import rack_figure, rack_layout

__all__ = [
    "BADGE_HEX", "GPU_COLOURS", "MAX_LEGEND", "MAX_THROTTLE_SHAPES", "STATUS_ORDER", "THRESHOLD_COLOUR",
    "binary_size", "burn_in_figure", "capacity_figures", "cluster_power_figure", "phase_figure",
    "distribution_figure", "dlc_figure", "fs_figure", "gpu_colour",
    "nccl_figure", "rack_figure", "rack_layout", "size_ticks", "threshold_value", "matrix_figure",
]  # fmt: skip
