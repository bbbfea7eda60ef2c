"""The key metrics followed across runs (declared by the checks, checks/core/presentation.py), stored
threshold parsing, and group-result membership: shared by the node, compare and search reads."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.db.models import QuerySet

from checks import presented
from checks.core.presentation import KeyMetric
from portal.runs.models import CheckResult, Scope


@dataclass(frozen=True)
class Metric:
    """A key measurement followed across runs, as declared by the checks that store it
    (checks/core/presentation.py KeyMetric), with the kinds that declare it."""

    key: str
    label: str
    name: str
    kinds: tuple[str, ...]
    unit: str
    better: str = "higher"
    scale: float = 1.0
    per_gpu: bool = False
    gpu_agg: str = "min"
    labels: tuple[tuple[str, str], ...] = ()
    tolerance_pct: float = 2.0
    group_value_on_node: bool = False

    def matches(self, kind: str, labels: dict[str, Any]) -> bool:
        return kind in self.kinds and all(str(labels.get(k)) == v for k, v in self.labels)


def _key_metrics() -> tuple[Metric, ...]:
    """Every declared key metric once, with every kind that declares it, in the kinds' rank order."""
    declared: dict[str, KeyMetric] = {}
    kinds: dict[str, list[str]] = {}
    for kind, shown in presented():
        for km in shown.key_metrics:
            if declared.setdefault(km.key, km) != km:
                raise ValueError(f"key metric {km.key!r} is declared differently by {kind} and {kinds[km.key]}")
            kinds.setdefault(km.key, []).append(kind)
    return tuple(
        Metric(
            key=km.key,
            label=km.label,
            name=km.name,
            kinds=tuple(kinds[km.key]),
            unit=km.unit,
            better=km.better,
            scale=km.scale,
            per_gpu=km.per_gpu,
            gpu_agg=km.gpu_agg,
            labels=km.labels,
            tolerance_pct=km.tolerance_pct,
            group_value_on_node=km.group_value_on_node,
        )  # fmt: skip
        for km in declared.values()
    )


KEY_METRICS: tuple[Metric, ...] = _key_metrics()
METRICS_BY_KEY = {m.key: m for m in KEY_METRICS}
_KEY_KINDS = sorted({k for m in KEY_METRICS for k in m.kinds})
_KEY_NAMES = sorted({m.name for m in KEY_METRICS})


def metric_for(*, kind: str, name: str, labels: dict[str, Any]) -> Metric | None:
    for metric in KEY_METRICS:
        if metric.name == name and metric.matches(kind, labels):
            return metric
    return None


def _members(node_set: str, cache: dict[str, frozenset[str]]) -> frozenset[str]:
    if node_set not in cache:
        try:
            cache[node_set] = frozenset(NodeSet(node_set)) if node_set else frozenset()
        except Exception:  # a malformed stored node set names no one, it does not break the page
            cache[node_set] = frozenset()
    return cache[node_set]


def group_result_ids(*, hostnames: Iterable[str], groups: QuerySet[CheckResult]) -> list[int]:
    """Ids of the group results that span any of `hostnames`. A folded node set cannot be searched in
    SQL, so this reads (id, node_set, attribution) of the candidate group results once and tests
    membership here: one query, bounded by the number of group results, not of nodes."""
    wanted = set(hostnames)
    cache: dict[str, frozenset[str]] = {}
    ids = []
    candidates = groups.filter(scope=Scope.GROUP).order_by().values_list("id", "node_set", "attribution")
    for pk, node_set, attribution in candidates:
        if wanted & _members(node_set, cache) or wanted & set(attribution or {}):
            ids.append(pk)
    return ids


_THRESHOLD = re.compile(r"^\s*(>=|<=|>|<)\s*(-?[\d.]+)\s*([^\s(,]*)")


def threshold_value(*, threshold: str, metric: Metric) -> float | None:
    """The first bound of a stored threshold (">= 460", ">= 2 GB/s"), in the metric's display unit.
    None when it is not a plain bound or its unit is not the one shown."""
    match = _THRESHOLD.match(threshold.split(",")[0])
    if not match:
        return None
    try:
        value = float(match.group(2))
    except ValueError:
        return None
    unit = match.group(3)
    if unit and unit != metric.unit:
        return None
    return value if unit else value * metric.scale
