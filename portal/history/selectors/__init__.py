"""Reads for the history pages: a node's timeline and trends, a cluster's runs, run comparison and
result search, one module per page. Every read is a fixed number of queries, whatever the number of
nodes or results."""

from __future__ import annotations

from portal.history.selectors.compare import (
    Comparison,
    MetricDelta,
    NodeComparison,
    StatusChange,
    run_previous,
    runs_compare,
    runs_recent,
)
from portal.history.selectors.metrics import (
    KEY_METRICS,
    METRICS_BY_KEY,
    Metric,
    group_result_ids,
    metric_for,
    threshold_value,
)
from portal.history.selectors.node import (
    TREND_RUNS,
    TimelineEntry,
    Trend,
    TrendPoint,
    node_get,
    node_results,
    node_trends,
    timeline_entries,
)
from portal.history.selectors.runs import cluster_run_counts, cluster_runs, with_counts
from portal.history.selectors.search import ResultFilter, check_names, results_search

__all__ = [
    "KEY_METRICS",
    "METRICS_BY_KEY",
    "TREND_RUNS",
    "Comparison",
    "Metric",
    "MetricDelta",
    "NodeComparison",
    "ResultFilter",
    "StatusChange",
    "TimelineEntry",
    "Trend",
    "TrendPoint",
    "check_names",
    "cluster_run_counts",
    "cluster_runs",
    "with_counts",
    "group_result_ids",
    "metric_for",
    "node_get",
    "node_results",
    "node_trends",
    "results_search",
    "run_previous",
    "runs_compare",
    "runs_recent",
    "threshold_value",
    "timeline_entries",
]
