"""Filesystem throughput of a run: each node alone and all at once, with the plan's floors."""

from __future__ import annotations

from dataclasses import dataclass

from checks import kinds_charted, presentation_of
from checks.core.presentation import ThroughputChart
from portal.charts.selectors.common import (
    item_thresholds,
)
from portal.ordering import natural_key as natural
from portal.runs.models import Measurement, Run, Scope


@dataclass
class FsData:
    title: str
    nodes: list[str]
    write: list[float | None]  # GB/s, fs_throughput: each node alone
    read: list[float | None]
    concurrent_write: list[float | None]  # GB/s, fs_aggregate: all nodes at once
    concurrent_read: list[float | None]
    aggregate_write: float | None
    aggregate_read: float | None
    min_write: float | None
    min_read: float | None
    min_aggregate_write: float | None
    min_aggregate_read: float | None
    has_aggregate: bool = False


def _direction(declared: ThroughputChart, name: str) -> str:
    """The direction ("write" or "read") of a name the kind declares, else ""."""
    return {declared.write: "write", declared.total_write: "write", declared.read: "read",
            declared.total_read: "read"}.get(name, "") if name else ""  # fmt: skip


def run_filesystem(*, run: Run) -> FsData:
    """Per-node write/read rates of the run's filesystem results, with the plan's floors: a node
    check's rates (each node alone), and a group check's per-node rates and total (all nodes at
    once). The kinds are those charted as "filesystem" (checks/core/presentation.py). One query."""
    declared = {kind: t for kind in kinds_charted("filesystem") if (t := presentation_of(kind).throughput)}
    names = {n for t in declared.values() for n in (t.write, t.read, t.total_write, t.total_read) if n}
    rows = Measurement.objects.filter(result__run=run, result__kind__in=list(declared), name__in=names).values_list(
        "result__kind", "result__scope", "result__item_key", "result__node__hostname", "name", "value", "labels"
    )
    alone: dict[str, dict[str, float | None]] = {}
    together: dict[str, dict[str, float | None]] = {}
    aggregate: dict[str, float | None] = {}
    items: dict[str, tuple[str, ThroughputChart]] = {}  # scope -> the plan item whose floors are drawn
    for kind, scope, item_key, hostname, name, value, labels in rows:
        t = declared[kind]
        ddir = _direction(t, name)
        if not ddir:  # another kind's name
            continue
        items[scope] = (item_key, t)
        gbps = None if value is None else value / 1e9
        labels = labels or {}
        if scope != Scope.GROUP:
            if not labels:  # the node's own total; per-job rows carry a job label
                alone.setdefault(hostname, {})[ddir] = gbps
        elif name in (t.total_write, t.total_read):
            aggregate[ddir] = gbps
        elif labels.get("node") and "job" not in labels:
            together.setdefault(labels["node"], {})[ddir] = gbps
    nodes = sorted(set(alone) | set(together), key=natural)
    node_key, node_decl = items.get(Scope.NODE, ("", ThroughputChart("", "")))
    group_key, group_decl = items.get(Scope.GROUP, ("", ThroughputChart("", "")))
    node_t, agg_t = item_thresholds(run, node_key), item_thresholds(run, group_key)
    return FsData(
        title=f"Filesystem throughput, run #{run.pk}",
        nodes=nodes,
        write=[alone.get(n, {}).get("write") for n in nodes],
        read=[alone.get(n, {}).get("read") for n in nodes],
        concurrent_write=[together.get(n, {}).get("write") for n in nodes],
        concurrent_read=[together.get(n, {}).get("read") for n in nodes],
        aggregate_write=aggregate.get("write"),
        aggregate_read=aggregate.get("read"),
        min_write=node_t.get(node_decl.min_write),
        min_read=node_t.get(node_decl.min_read),
        min_aggregate_write=agg_t.get(group_decl.min_write),
        min_aggregate_read=agg_t.get(group_decl.min_read),
        has_aggregate=bool(together or aggregate),
    )
