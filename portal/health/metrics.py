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
    kiln_cluster_last_sweep_timestamp_seconds       last scheduled sweep that started a run
"Latest" = each node's newest finished (pass/warn/fail) result of that check kind. Three queries.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db.models import Max, Subquery
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from checks.presentation import presented
from portal.health.models import HealthState, NodeHealth, ScheduledFire
from portal.inventory.models import Node
from portal.runs.models import CheckResult, Measurement, Scope, Status

# (kind, measurement) -> (metric name, help, extra label name, extra label value or None for the
# measurement's own label of that name), as each check kind declares (checks/presentation.py).
MEASUREMENTS: dict[tuple[str, str], tuple[str, str, str, str | None]] = {
    (kind, p.measurement): (p.metric, p.help, p.label, p.label_value)
    for kind, shown in presented()
    for p in shown.prometheus
}


class KilnCollector:
    """Reads the database on every scrape (no state kept between scrapes)."""

    def collect(self) -> Iterator[Metric]:
        yield from self._health()
        yield from self._measurements()
        yield from self._sweeps()

    def _health(self) -> Iterator[Metric]:
        state = GaugeMetricFamily(
            "kiln_node_health_state", "Node health state (1 = current)", labels=["cluster", "node", "state"]
        )
        checked = GaugeMetricFamily(
            "kiln_node_health_checked_timestamp_seconds", "When a run last judged the node", labels=["cluster", "node"]
        )
        current = {h["node_id"]: h for h in NodeHealth.objects.values("node_id", "state", "checked_at")}
        for node_id, cluster, host in Node.objects.values_list("id", "cluster__name", "hostname").order_by(
            "cluster__name", "hostname"
        ):
            health = current.get(node_id)
            now_state = health["state"] if health else HealthState.UNKNOWN
            for choice in HealthState.values:
                state.add_metric([cluster, host, choice], 1.0 if choice == now_state else 0.0)
            if health and health["checked_at"]:
                checked.add_metric([cluster, host], health["checked_at"].timestamp())
        yield state
        yield checked

    def _measurements(self) -> Iterator[Metric]:
        kinds = {kind for kind, _ in MEASUREMENTS}
        latest = (
            CheckResult.objects.filter(
                scope=Scope.NODE, kind__in=kinds, status__in=[Status.PASS, Status.WARN, Status.FAIL]
            )
            .values("node_id", "kind")
            .annotate(last=Max("id"))
            .values("last")
        )
        rows = Measurement.objects.filter(
            result_id__in=Subquery(latest), name__in={name for _, name in MEASUREMENTS}, value__isnull=False
        ).values_list(
            "result__node__cluster__name", "result__node__hostname", "result__kind", "name", "gpu", "labels", "value"
        )
        families: dict[str, GaugeMetricFamily] = {}
        for cluster, host, kind, name, gpu, labels, value in rows:
            spec = MEASUREMENTS.get((kind, name))
            if spec is None or value is None:  # value is never None (filtered above); the row type cannot say so
                continue
            metric, help_text, extra, extra_value = spec
            names = ["cluster", "node", "gpu"] + ([extra] if extra else [])
            family = families.get(metric)
            if family is None:
                family = families[metric] = GaugeMetricFamily(metric, help_text, labels=names)
            values = [cluster, host, "" if gpu is None else str(gpu)]
            if extra:
                values.append(extra_value if extra_value is not None else str((labels or {}).get(extra, "")))
            family.add_metric(values, float(value))
        yield from families.values()

    def _sweeps(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "kiln_cluster_last_sweep_timestamp_seconds", "Last scheduled sweep that started a run", labels=["cluster"]
        )
        rows: Any = (
            ScheduledFire.objects.filter(run__isnull=False)
            .values("schedule__cluster__name")
            .annotate(last=Max("fire_time"))
        )
        for row in rows:
            family.add_metric([row["schedule__cluster__name"]], row["last"].timestamp())
        yield family


def exposition() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KilnCollector())
    return generate_latest(registry)
