"""Reads for the chart pages: stored results turned into plain data for the figure builders, one
module per chart family. Which family draws a result is the check kind's declaration
(checks/core/presentation.py Presentation.chart).

Every run-level read is a fixed number of queries whatever the node count (values() rows, no
per-node lookups). Result-level reads load only the series a chart draws.
"""

from __future__ import annotations

from portal.charts.selectors.burn_in import (
    BurnInData,
    ThrottleSpan,
    Trace,
    burn_in_result,
    slowdown_threshold,
)
from portal.charts.selectors.capacity import (
    CapacityData,
    RackPositions,
    capacity_data,
    capacity_plans,
    capacity_result,
    capacity_results,
    facility_rack_positions,
)
from portal.charts.selectors.common import MAX_POINTS, MIN_DEVIATION, OUTLIER_Z, chart_kind, item_thresholds, robust_z
from portal.charts.selectors.dlc import DlcData, dlc_result
from portal.charts.selectors.ecc import EccData, ecc_result, in_ecc_table
from portal.charts.selectors.filesystem import FsData, run_filesystem
from portal.charts.selectors.fleet import (
    Distribution,
    MetricChoice,
    Point,
    item_kind,
    metric_direction,
    run_distribution,
    run_metric_choices,
    run_metric_values,
)
from portal.charts.selectors.links import RunChartLink, result_series, run_chart_links, series_csv_lines
from portal.charts.selectors.matrix import MAX_SIDE, MatrixData, MatrixResult, matrix_result
from portal.charts.selectors.nccl import Curve, NcclData, nccl_result, nccl_run
from portal.charts.selectors.rack import UNRACKED, RackCell, RackData, node_results_url, node_statuses, run_rack

__all__ = [
    "CapacityData", "RackPositions", "capacity_data", "capacity_plans", "capacity_result", "capacity_results",
    "facility_rack_positions",
    "MAX_POINTS", "MIN_DEVIATION", "OUTLIER_Z", "UNRACKED", "BurnInData", "Curve",
    "Distribution", "DlcData", "EccData", "FsData", "MetricChoice", "NcclData", "Point", "RackCell", "RackData",
    "RunChartLink", "ThrottleSpan", "Trace", "burn_in_result", "chart_kind", "dlc_result", "ecc_result",
    "item_thresholds", "nccl_result", "nccl_run", "node_results_url", "node_statuses", "result_series",
    "robust_z", "run_chart_links", "run_distribution", "run_filesystem", "run_metric_choices", "run_metric_values",
    "run_rack", "series_csv_lines", "slowdown_threshold", "item_kind", "metric_direction",
    "MAX_SIDE", "MatrixData", "MatrixResult", "matrix_result", "in_ecc_table",
]  # fmt: skip
