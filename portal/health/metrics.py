"""/metrics: node health and the latest key measurements in the Prometheus exposition format.

Exported (labels cluster, node; gpu where per GPU):
    kiln_node_health_state{state}          1 for the node's current state, 0 for the others
    kiln_node_health_checked_timestamp_seconds   when a run last judged the node
    kiln_nccl_busbw_peak_gbps              nccl_allreduce busbw_peak
    kiln_gpu_gflops                        burn_in gflops
    kiln_gpu_burn_temp_max_celsius         burn_in temp_max
    kiln_gpu_temp_celsius{phase}           dlc_temperature temp_gpu_steady (idle / load)
    kiln_gpu_memory_temp_celsius{phase}    dlc_temperature temp_memory_steady
    kiln_gpu_ecc_errors{counter}           ecc_health counters (volatile/aggregate, corrected/uncorrected)
    kiln_fs_bandwidth_bytes_per_second{direction}   fs_throughput write_bw / read_bw
    kiln_gpu_host_to_device_gbps           host_bw h2d_gbps (nvbandwidth)
    kiln_gpu_device_to_host_gbps           host_bw d2h_gbps (nvbandwidth)
    kiln_node_check_failing{kind}          1 when the node's latest result of that check kind is `fail`, else 0
    kiln_cluster_last_sweep_timestamp_seconds       last scheduled sweep that started a run
and the fleet families of portal/health/fleet_metrics.py (nodes per state, sweep duration and due
time, worker beats).
"Latest" = each node's newest finished (pass/warn/fail) result of that check kind; `error` (could
not tell) neither fails nor clears a check here, as in the node's health.

Cardinality: per node, 5 states, one failing series per check kind it ran, and per GPU index the
measurement families above: all bounded by the inventory (nodes x GPUs x kinds), none by history.

The measurement families are rendered when a run that judged a node finishes (node_samples, stored
as NodeMetrics rows by portal/health/services/exported.py); a scrape streams those rows, in family
order, after the health families read live. `cluster` limits a scrape to one cluster (one scrape
job per cluster, or a federating Prometheus per site: docs/operations/monitoring.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import groupby
from operator import itemgetter
from typing import Any

from django.db.models import Max, QuerySet
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from checks import presented
from portal.health.models import HealthState, NodeMetrics, ScheduledFire
from portal.inventory.models import Node
from portal.runs.models import CheckResult, Measurement, Scope, Status

# (kind, measurement) -> (metric name, help, extra label name, extra label value or None for the
# measurement's own label of that name), as each check kind declares (checks/core/presentation.py).
MEASUREMENTS: dict[tuple[str, str], tuple[str, str, str, str | None]] = {
    (kind, p.measurement): (p.metric, p.help, p.label, p.label_value)
    for kind, shown in presented()
    for p in shown.prometheus
}
# metric name -> (help, label names), in declaration order: the order families are scraped in.
FAMILIES: dict[str, tuple[str, list[str]]] = {
    metric: (help_text, ["cluster", "node", "gpu"] + ([extra] if extra else []))
    for metric, help_text, extra, _ in MEASUREMENTS.values()
}
FAILING = "kiln_node_check_failing"
FAMILIES[FAILING] = ("Latest finished result of this check kind failed (1) or not (0)", ["cluster", "node", "kind"])
JUDGED = [Status.PASS, Status.WARN, Status.FAIL]  # finished with a verdict on the hardware
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ROWS_PER_FETCH = 2000  # rows per database round trip while streaming a scrape, or the latest measurements


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


def _header(metric: str) -> str:
    help_text, labels = FAMILIES[metric]
    return render([GaugeMetricFamily(metric, help_text, labels=labels)])


def _sample_lines(family: Metric) -> str:
    return "".join(line + "\n" for line in render([family]).splitlines() if not line.startswith("#"))


def node_samples(node_ids: Iterable[int] | QuerySet[Any]) -> Iterator[tuple[int, dict[str, str]]]:
    """(node id, {metric: sample lines}) of those nodes' latest measurements and failing checks, a
    node at a time in node order, from two streamed queries whatever their number (the latest
    results are picked in SQL): memory holds one node's families."""
    ids = node_ids if isinstance(node_ids, QuerySet) else list(node_ids)
    latest = (
        CheckResult.objects.filter(node_id__in=ids, scope=Scope.NODE, status__in=JUDGED)
        .order_by()
        .values("node_id", "kind")
        .annotate(last=Max("id"))
        .values("last")
    )
    failing = groupby(_failing(latest), key=itemgetter(0))
    rows = (
        Measurement.objects.filter(
            result_id__in=latest.filter(kind__in={kind for kind, _ in MEASUREMENTS}),
            name__in={name for _, name in MEASUREMENTS},
            value__isnull=False,
        )
        .order_by("result__node_id", "gpu", "id")
        .values_list(
            "result__node_id",
            "result__node__cluster__name",
            "result__node__hostname",
            "result__kind",
            "name",
            "gpu",
            "labels",
            "value",
        )
    )  # fmt: skip
    measured = groupby(rows.iterator(chunk_size=ROWS_PER_FETCH), key=itemgetter(0))
    # Every node with a measurement has a verdict, so has its failing family: the two streams
    # advance together, the measurements a node behind at most.
    pending = next(measured, None)
    for node_id, verdicts in failing:
        families: dict[str, GaugeMetricFamily] = {FAILING: _failing_family(verdicts)}
        while pending is not None and pending[0] <= node_id:
            if pending[0] == node_id:
                _add_measured(families, pending[1])
            pending = next(measured, None)
        yield node_id, {metric: _sample_lines(family) for metric, family in families.items()}


def _add_measured(families: dict[str, GaugeMetricFamily], rows: Iterable[tuple[Any, ...]]) -> None:
    for _, cluster, host, kind, name, gpu, labels, value in rows:
        spec = MEASUREMENTS.get((kind, name))
        if spec is None or value is None:  # value is never None (filtered above); the row type cannot say so
            continue
        metric, help_text, extra, extra_value = spec
        family = families.get(metric)
        if family is None:
            family = families[metric] = GaugeMetricFamily(metric, help_text, labels=FAMILIES[metric][1])
        values = [cluster, host, "" if gpu is None else str(gpu)]
        if extra:
            values.append(extra_value if extra_value is not None else str((labels or {}).get(extra, "")))
        family.add_metric(values, float(value))


def _failing(latest: QuerySet[Any]) -> Iterator[tuple[Any, ...]]:
    """The latest verdict of each check kind of each node, streamed in node order."""
    rows = CheckResult.objects.filter(id__in=latest).values_list(
        "node_id", "node__cluster__name", "node__hostname", "kind", "status"
    )
    return rows.order_by("node_id", "kind").iterator(chunk_size=ROWS_PER_FETCH)


def _failing_family(verdicts: Iterable[tuple[Any, ...]]) -> GaugeMetricFamily:
    """One node's kiln_node_check_failing family: a 0/1 sample per check kind it has a verdict of."""
    help_text, labels = FAMILIES[FAILING]
    family = GaugeMetricFamily(FAILING, help_text, labels=labels)
    for _, cluster, host, kind, status in verdicts:
        family.add_metric([cluster, host, kind], 1.0 if status == Status.FAIL else 0.0)
    return family


STATE_FAMILY = ("kiln_node_health_state", "Node health state (1 = current)")
CHECKED_FAMILY = ("kiln_node_health_checked_timestamp_seconds", "When a run last judged the node")


def label_value(text: str) -> str:
    """A label value escaped as the text format requires: backslash, double quote and line feed."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _health(nodes: Any) -> Iterator[str]:
    """The health families, one line per sample, written here rather than through prometheus_client's
    objects: 87k samples at 12,500 nodes took it 1.3 s; the tests parse both with its parser."""
    rows = nodes.values_list("cluster__name", "hostname", "health__state", "health__checked_at").order_by(
        "cluster_id", "id"
    )
    states, checked = (
        [_header_of(*STATE_FAMILY, ["cluster", "node", "state"])],
        [_header_of(*CHECKED_FAMILY, ["cluster", "node"])],
    )
    for cluster, host, state, checked_at in rows:
        labels = f'cluster="{label_value(cluster)}",node="{label_value(host)}"'
        now_state = state or HealthState.UNKNOWN
        states.extend(
            f'{STATE_FAMILY[0]}{{{labels},state="{choice}"}} {"1.0" if choice == now_state else "0.0"}\n'
            for choice in HealthState.values
        )
        if checked_at is not None:
            checked.append(f"{CHECKED_FAMILY[0]}{{{labels}}} {floatToGoString(checked_at.timestamp())}\n")
    yield "".join(states)
    yield "".join(checked)


def _header_of(name: str, help_text: str, labels: list[str]) -> str:
    return render([GaugeMetricFamily(name, help_text, labels=labels)])


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


def _stored(cluster: str | None) -> Iterator[str]:
    """The stored measurement families, each under one HELP/TYPE header, nodes in the order they
    were added (Prometheus reads samples in any order within a family)."""
    rows = NodeMetrics.objects.filter(family__in=list(FAMILIES))
    if cluster is not None:  # a semi-join: the rows keep the index's order, nothing is sorted
        rows = rows.filter(node_id__in=Node.objects.filter(cluster__name=cluster).values("id"))
    current = None
    for family, samples in (
        # The (family, node) index's order: no join and no sort of 100 MB of text at 12,500 nodes.
        rows.order_by("family", "node_id").values_list("family", "samples").iterator(chunk_size=ROWS_PER_FETCH)
    ):
        if family != current:
            current = family
            yield _header(family)
        yield samples


def exposition_chunks(*, cluster: str | None = None) -> Iterator[bytes]:
    """The scrape body in pieces, for a streamed response: memory stays flat at any fleet size."""
    nodes = Node.objects.all() if cluster is None else Node.objects.filter(cluster__name=cluster)
    for text in _health(nodes):
        yield text.encode()
    buffer: list[str] = []
    size = 0
    for text in _stored(cluster):
        buffer.append(text)
        size += len(text)
        if size >= 1 << 20:  # hand the server ~1 MB at a time, not one row
            yield "".join(buffer).encode()
            buffer, size = [], 0
    from portal.health.fleet_metrics import fleet_families  # it imports the services, which import this module

    buffer.append(render([_sweeps(cluster), *fleet_families(cluster)]))
    yield "".join(buffer).encode()


def exposition(*, cluster: str | None = None) -> bytes:
    return b"".join(exposition_chunks(cluster=cluster))
