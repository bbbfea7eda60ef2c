"""/metrics: node health, per-cluster aggregates of the key measurements and, on request, each
node's per-GPU values, in the Prometheus exposition format.

Served by default (a handful of series per node, the rest per cluster):
    kiln_node_health_state{cluster,node,state}              1, for the node's current state only
    kiln_node_health_checked_timestamp_seconds{cluster,node}  when a run last judged the node
    kiln_node_check_failing{cluster,node,kind}              1 while the node's latest verdict of that kind is fail
    kiln_cluster_check_failing_nodes{cluster,kind}          nodes whose latest verdict of that kind is fail
    kiln_cluster_measurement{cluster,metric,<label>,stat}   min, p1, p10, p50, p90, p99, max, mean of the
                                                            nodes' latest values of a measurement family
    kiln_cluster_measurement_values{cluster,metric,<label>} how many values (GPUs, or nodes) that is
    kiln_cluster_measurement_nodes{cluster,metric,<label>}  how many nodes they came from
    kiln_cluster_last_sweep_timestamp_seconds{cluster}      last scheduled sweep that started a run
and the fleet families of portal/health/fleet_metrics.py (nodes per state, sweep duration and due
time, worker beats). `metric` names a measurement family below and <label> is that family's own
extra label (phase, counter, direction, ...), absent when it has none.

Per-node detail (`detail`: the KILN_METRICS_DETAIL setting, or `?detail=1` with `?cluster=`), each
node's latest value per GPU, labels cluster, node, gpu and the family's own label:
    kiln_gpu_gflops, kiln_gpu_burn_temp_max_celsius, kiln_gpu_temp_celsius{phase},
    kiln_gpu_memory_temp_celsius{phase}, kiln_gpu_ecc_errors{counter}, kiln_nccl_busbw_peak_gbps,
    kiln_fs_bandwidth_bytes_per_second{direction}, kiln_gpu_host_to_device_gbps, ...
as each check kind declares them (checks/core/presentation.py PromMetric).
"Latest" = each node's newest finished (pass/warn/fail) result of that check kind; `error` (could
not tell) neither fails nor clears a check here, as in the node's health.

Cardinality: by default 2 series per node plus one per failing check of a node, and per cluster
5 states + the check kinds + 10 per measurement family and label value (about 300): 12,500 nodes
are ~25k series. Detail adds per node GPUs x families (~150 for an 8-GPU node).

Nothing here reads measurements at scrape time. When a run that judged a node finishes, the node's
families are rendered (node_samples, stored as NodeMetrics rows with their values) and then its
cluster's (cluster_samples over those rows, stored as ClusterMetrics rows) by
portal/health/services/exported.py; a scrape reads the nodes' health live and streams stored rows.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Iterator
from typing import Any

from django.db.models import F, FloatField, Func, Max, TextField
from django.db.models.functions import Cast
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from checks import presented
from portal.health.models import ClusterMetrics, HealthState, NodeMetrics, ScheduledFire
from portal.inventory.models import Node
from portal.runs.models import CheckResult, Measurement, Scope, Status

# (kind, measurement) -> (metric name, help, extra label name, extra label value or None for the
# measurement's own label of that name), as each check kind declares (checks/core/presentation.py).
MEASUREMENTS: dict[tuple[str, str], tuple[str, str, str, str | None]] = {
    (kind, p.measurement): (p.metric, p.help, p.label, p.label_value)
    for kind, shown in presented()
    for p in shown.prometheus
}
# The per-node detail families: metric name -> (help, label names), in declaration order.
FAMILIES: dict[str, tuple[str, list[str]]] = {
    metric: (help_text, ["cluster", "node", "gpu"] + ([extra] if extra else []))
    for metric, help_text, extra, _ in MEASUREMENTS.values()
}
FAILING = "kiln_node_check_failing"
FAILING_HELP = "The node's latest finished result of this check kind failed (only failing kinds are listed)"
CLUSTER_FAILING = "kiln_cluster_check_failing_nodes"
AGGREGATE = "kiln_cluster_measurement"
AGGREGATE_VALUES = "kiln_cluster_measurement_values"
AGGREGATE_NODES = "kiln_cluster_measurement_nodes"
# The families stored per cluster (ClusterMetrics), with their help: every scrape streams them.
CLUSTER_FAMILIES: dict[str, str] = {
    FAILING: FAILING_HELP,
    CLUSTER_FAILING: "Nodes of the cluster whose latest finished result of this check kind failed",
    AGGREGATE: "Distribution of the nodes' latest values of a measurement family (label metric) over the "
    "cluster: min, nearest-rank percentiles, max and mean",
    AGGREGATE_VALUES: "Values behind kiln_cluster_measurement: one per GPU (or per node)",
    AGGREGATE_NODES: "Nodes behind kiln_cluster_measurement",
}
# (stat label, quantile): the extremes, the median and the tails an SRE reads a fleet by. Nearest
# rank: every percentile is a value some GPU or node reported, never a mean of two (a PCIe width of
# 12 lanes between a x8 and a x16 link would be none).
STATS: tuple[tuple[str, float], ...] = (
    ("min", 0.0), ("p1", 0.01), ("p10", 0.10), ("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("max", 1.0),
)  # fmt: skip
JUDGED = [Status.PASS, Status.WARN, Status.FAIL]  # finished with a verdict on the hardware
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ROWS_PER_FETCH = 2000  # stored rows per database round trip while streaming a scrape or aggregating
STATE_FAMILY = ("kiln_node_health_state", "Node health state: 1, labelled with the current state")
CHECKED_FAMILY = ("kiln_node_health_checked_timestamp_seconds", "When a run last judged the node")

Values = dict[str, Any]  # a NodeMetrics row's values: {label value: [floats]} or {kind: 0 | 1}


class _One:
    """A collector of fixed families: prometheus_client renders them (escaping, float format)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def render(families: Iterable[Metric]) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_One(families))
    return generate_latest(registry).decode()


def _header(name: str, help_text: str) -> str:
    return render([GaugeMetricFamily(name, help_text)])


def _sample_lines(family: Metric) -> str:
    return "".join(line + "\n" for line in render([family]).splitlines() if not line.startswith("#"))


def label_value(text: str) -> str:
    """A label value escaped as the text format requires: backslash, double quote and line feed."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _line(name: str, labels: Iterable[tuple[str, str]], value: float) -> str:
    inner = ",".join(f'{key}="{label_value(text)}"' for key, text in labels)
    return f"{name}{{{inner}}} {floatToGoString(value)}\n"


def node_samples(node_ids: list[int]) -> dict[tuple[int, str], tuple[str, Values]]:
    """(node id, family) -> (sample lines, values) of those nodes' latest measurements and failing
    checks. Four queries; the sample lines written here (prometheus_client's objects cost ~15 us a
    sample) and a row's labels decoded only for a family that is labelled by one of them."""
    nodes = {
        pk: (cluster, host)
        for pk, cluster, host in Node.objects.filter(id__in=node_ids).values_list("id", "cluster__name", "hostname")
    }
    latest = {
        last: (node_id, kind)
        for node_id, kind, last in CheckResult.objects.filter(node_id__in=node_ids, scope=Scope.NODE, status__in=JUDGED)
        .values("node_id", "kind")
        .annotate(last=Max("id"))
        .values_list("node_id", "kind", "last")
    }
    stored = _failing(list(latest))
    rows = (
        Measurement.objects.filter(
            result_id__in=list(latest), name__in={name for _, name in MEASUREMENTS}, value__isnull=False
        )
        .annotate(labels_text=Cast("labels", TextField()))
        .order_by("result_id", "gpu", "id")
        .values_list("result_id", "name", "gpu", "labels_text", "value")
    )
    lines: dict[tuple[int, str], list[str]] = {}
    values: dict[tuple[int, str], dict[str, list[float]]] = {}
    for result_id, name, gpu, labels_text, value in rows.iterator(chunk_size=ROWS_PER_FETCH):
        node_id, kind = latest[result_id]
        spec = MEASUREMENTS.get((kind, name))
        if spec is None or value is None:  # value is never None (filtered above); the row type cannot say so
            continue
        metric, _, extra, extra_value = spec
        variant = ""
        if extra:
            labels = json.loads(labels_text) if extra_value is None and labels_text else {}
            variant = extra_value if extra_value is not None else str(labels.get(extra, ""))
        cluster, host = nodes[node_id]
        labelled = [("cluster", cluster), ("node", host), ("gpu", "" if gpu is None else str(gpu))]
        # Label names sorted, as prometheus_client writes them (the text before this was rendered by it).
        labelled = sorted(labelled + ([(extra, variant)] if extra else []))
        lines.setdefault((node_id, metric), []).append(_line(metric, labelled, value))
        values.setdefault((node_id, metric), {}).setdefault(variant, []).append(float(value))
    stored.update({key: ("".join(found), values[key]) for key, found in lines.items()})
    return stored


def _failing(latest: list[int]) -> dict[tuple[int, str], tuple[str, Values]]:
    """Per node with a verdict: kiln_node_check_failing lines of the kinds whose latest verdict
    failed (none: empty), and {kind: 1 failed / 0} of every kind it has a verdict of."""
    verdicts: dict[tuple[int, str], Values] = {}
    lines: dict[tuple[int, str], list[str]] = {}
    rows = CheckResult.objects.filter(id__in=latest).values_list(
        "node_id", "node__cluster__name", "node__hostname", "kind", "status"
    )
    for node_id, cluster, host, kind, status in rows.order_by("node_id", "kind"):
        key = (node_id, FAILING)
        verdicts.setdefault(key, {})[kind] = 1 if status == Status.FAIL else 0
        out = lines.setdefault(key, [])
        if status == Status.FAIL:
            out.append(_line(FAILING, [("cluster", cluster), ("node", host), ("kind", kind)], 1.0))
    return {key: ("".join(lines[key]), kinds) for key, kinds in verdicts.items()}


def nearest_rank(ordered: list[float], quantile: float) -> float:
    """The value of rank ceil(q * n) of n sorted values (the smallest for q = 0)."""
    return ordered[max(0, math.ceil(quantile * len(ordered)) - 1)]


def cluster_samples(
    cluster: str, values: Iterable[tuple[str, Values | None]], failing: Iterable[str]
) -> dict[str, str]:
    """The cluster's families (CLUSTER_FAMILIES) -> sample lines, from its nodes' stored rows:
    `values` (family, values) of every NodeMetrics row, `failing` the kiln_node_check_failing lines
    of its nodes. Families without a sample are left out."""
    failing_nodes: dict[str, int] = {}
    series: dict[tuple[str, str], list[float]] = {}
    nodes: dict[tuple[str, str], int] = {}
    for family, stored in values:
        if not stored:
            continue
        if family == FAILING:
            for kind, bad in stored.items():
                failing_nodes[kind] = failing_nodes.get(kind, 0) + int(bad)
        elif family in FAMILIES:
            for variant, numbers in stored.items():
                series.setdefault((family, variant), []).extend(numbers)
                nodes[(family, variant)] = nodes.get((family, variant), 0) + 1
    out = {
        FAILING: "".join(failing),
        CLUSTER_FAILING: "".join(
            _line(CLUSTER_FAILING, [("cluster", cluster), ("kind", kind)], float(count))
            for kind, count in sorted(failing_nodes.items())
        ),
    }
    order = {metric: i for i, metric in enumerate(FAMILIES)}
    stats, counts, sources = [], [], []
    for family, variant in sorted(series, key=lambda key: (order[key[0]], key[1])):
        numbers = sorted(series[(family, variant)])
        extra = FAMILIES[family][1][3:]  # the family's own label after cluster, node, gpu: one or none
        labels = [("cluster", cluster), ("metric", family)] + [(name, variant) for name in extra]
        for stat, quantile in STATS:
            stats.append(_line(AGGREGATE, [*labels, ("stat", stat)], nearest_rank(numbers, quantile)))
        stats.append(_line(AGGREGATE, [*labels, ("stat", "mean")], math.fsum(numbers) / len(numbers)))
        counts.append(_line(AGGREGATE_VALUES, labels, float(len(numbers))))
        sources.append(_line(AGGREGATE_NODES, labels, float(nodes[(family, variant)])))
    out |= {AGGREGATE: "".join(stats), AGGREGATE_VALUES: "".join(counts), AGGREGATE_NODES: "".join(sources)}
    return {family: text for family, text in out.items() if text}


def _health(nodes: Any) -> Iterator[str]:
    """The health families, one line per sample, written here rather than through prometheus_client's
    objects (it took 1.3 s for 87k samples); the tests parse both with its parser."""
    # Epoch seconds from the database: no datetime built per node (12,500 of them a scrape).
    epoch = Func(F("health__checked_at"), template="EXTRACT(EPOCH FROM %(expressions)s)", output_field=FloatField())
    rows = (
        nodes.annotate(checked_s=epoch)
        .values_list("cluster__name", "hostname", "health__state", "checked_s")
        .order_by("cluster_id", "id")
    )
    states, checked = [_header(*STATE_FAMILY)], [_header(*CHECKED_FAMILY)]
    for cluster, host, state, checked_s in rows:
        labels = f'cluster="{label_value(cluster)}",node="{label_value(host)}"'
        states.append(f'{STATE_FAMILY[0]}{{{labels},state="{state or HealthState.UNKNOWN}"}} 1.0\n')
        if checked_s is not None:
            checked.append(f"{CHECKED_FAMILY[0]}{{{labels}}} {floatToGoString(float(checked_s))}\n")
    yield "".join(states)
    yield "".join(checked)


def _sweeps(cluster: str | None) -> Metric:
    family = GaugeMetricFamily(
        "kiln_cluster_last_sweep_timestamp_seconds", "Last scheduled sweep that started a run", labels=["cluster"]
    )
    fires = ScheduledFire.objects.filter(run__isnull=False)
    if cluster is not None:
        fires = fires.filter(schedule__cluster__name=cluster)
    rows: Any = fires.values("schedule__cluster__name").annotate(last=Max("fire_time"))
    for row in rows:
        family.add_metric([row["schedule__cluster__name"]], row["last"].timestamp())
    return family


def _stored(rows: Any, helps: dict[str, str]) -> Iterator[str]:
    """Stored (family, samples) rows in family order, each family under one HELP/TYPE header."""
    current = None
    for family, samples in rows.values_list("family", "samples").iterator(chunk_size=ROWS_PER_FETCH):
        if family != current:
            current = family
            yield _header(family, helps[family])
        yield samples


def _cluster_stored(cluster: str | None) -> Iterator[str]:
    rows = ClusterMetrics.objects.filter(family__in=list(CLUSTER_FAMILIES))
    if cluster is not None:
        rows = rows.filter(cluster__name=cluster)
    yield from _stored(rows.order_by("family", "cluster_id"), CLUSTER_FAMILIES)


def _detail_stored(cluster: str | None) -> Iterator[str]:
    """The per-GPU families, nodes in the order they were added (Prometheus reads samples in any
    order within a family)."""
    rows = NodeMetrics.objects.filter(family__in=list(FAMILIES))
    if cluster is not None:  # the cluster's node ids as a list: the rows keep the index's order, nothing is sorted
        rows = rows.filter(node_id__in=list(Node.objects.filter(cluster__name=cluster).values_list("id", flat=True)))
    # The (family, node) index's order: no join and no sort of 100 MB of text at 12,500 nodes.
    yield from _stored(
        rows.order_by("family", "node_id"), {name: help_text for name, (help_text, _) in FAMILIES.items()}
    )


def exposition_chunks(*, cluster: str | None = None, detail: bool = False) -> Iterator[bytes]:
    """The scrape body in pieces, for a streamed response: memory stays flat at any fleet size.
    `detail` adds every node's per-GPU families (of one cluster, or all of them)."""
    nodes = Node.objects.all() if cluster is None else Node.objects.filter(cluster__name=cluster)
    for text in _health(nodes):
        yield text.encode()
    buffer: list[str] = []
    size = 0
    stored = _cluster_stored(cluster)
    for text in itertools.chain(stored, _detail_stored(cluster)) if detail else stored:
        buffer.append(text)
        size += len(text)
        if size >= 1 << 20:  # hand the server ~1 MB at a time, not one row
            yield "".join(buffer).encode()
            buffer, size = [], 0
    from portal.health.fleet_metrics import fleet_families  # it imports the services, which import this module

    buffer.append(render([_sweeps(cluster), *fleet_families(cluster)]))
    yield "".join(buffer).encode()


def exposition(*, cluster: str | None = None, detail: bool = False) -> bytes:
    return b"".join(exposition_chunks(cluster=cluster, detail=detail))
