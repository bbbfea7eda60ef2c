"""Reads for the chart pages: stored results turned into plain data for the figure builders.

Every run-level read is a fixed number of queries whatever the node count (values() rows, no
per-node lookups). Result-level reads load only the series a chart draws.
"""

from __future__ import annotations

import csv
import io
import json
import re
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ClusterShell.NodeSet import NodeSet

from portal.charts.lttb import downsample
from portal.inventory.models import Node
from portal.runs.models import CheckResult, Measurement, Run, Scope, Series

# Telemetry is drawn at this many points per trace at most (LTTB keeps spikes); exports stay whole.
MAX_POINTS = 1500
# Robust outlier score: |x - median| / (1.4826 * MAD) above this (Iglewicz & Hoaglin's 3.5).
OUTLIER_Z = 3.5
MIN_DEVIATION = 0.05

NCCL_KINDS = ("nccl_allreduce", "nccl_allreduce_multi")
FS_KINDS = ("fs_throughput", "fs_aggregate")
BURN_METRICS = (("temp_gpu", "GPU temperature", "C"), ("power_w", "Power", "W"), ("sm_clock_mhz", "SM clock", "MHz"))


def chart_kind(kind: str) -> str:
    """Which chart a result of this check kind gets ('' = none)."""
    if kind in NCCL_KINDS:
        return "nccl"
    if kind in FS_KINDS:
        return "filesystem"
    return {"burn_in": "burn_in", "dlc_temperature": "dlc", "ecc_health": "ecc"}.get(kind, "")


def item_thresholds(run: Run, item_key: str) -> dict[str, Any]:
    """The thresholds a plan item ran with, from the run's snapshot (never today's definition)."""
    for item in (run.plan_snapshot or {}).get("items", []):
        if item.get("key") == item_key:
            return dict(item.get("thresholds") or {})
    return {}


def robust_z(values: list[float]) -> list[float | None]:
    """Each value's robust z-score, (x - median) / (1.4826 * MAD), sign kept; the scale is the runs
    app's (portal/runs/outliers.py, which judges the run-level verdicts) so chart labels and
    verdicts agree. None for every value when there are fewer than 3 or no spread at all."""
    from portal.runs.outliers import robust_scale

    if len(values) < 3:
        return [None] * len(values)
    median, scale = robust_scale(values)
    if scale <= 0:
        return [None] * len(values)
    return [(v - median) / scale for v in values]


# --- NCCL --------------------------------------------------------------------------------------


@dataclass
class Curve:
    name: str
    x: list[float]
    y: list[float | None]
    url: str = ""


@dataclass
class NcclData:
    title: str
    curves: list[Curve]
    threshold: float | None


def _curve_name(result: CheckResult, series: Series) -> str:
    labels = series.labels or {}
    if labels.get("pair"):
        return f"pair {labels['pair']}"
    if result.scope == Scope.GROUP:
        return result.node_set or result.node.hostname
    return result.node.hostname


def nccl_result(*, result: CheckResult) -> NcclData:
    """busbw by message size of one NCCL result: one curve per stored series (per pair when the
    series are labelled with one)."""
    series = Series.objects.filter(result=result, name="busbw").order_by("id")
    curves = [Curve(_curve_name(result, s), list(s.x), list(s.y)) for s in series]
    threshold = item_thresholds(result.run, result.item_key).get("min_busbw_gbps")
    where = result.node_set if result.scope == Scope.GROUP else result.node.hostname
    return NcclData(title=f"{result.item_key}: busbw on {where}", curves=curves, threshold=threshold)


def nccl_run(*, run: Run, item_key: str) -> NcclData:
    """Every node's (or group's) busbw curve of one NCCL item of a run: one query."""
    from django.urls import reverse

    rows = (
        Series.objects.filter(result__run=run, result__item_key=item_key, name="busbw")
        .select_related("result__node")
        .only("x", "y", "labels", "result__id", "result__scope", "result__node_set", "result__node__hostname")
        .order_by("result__node__hostname", "id")
    )
    curves = [
        Curve(_curve_name(s.result, s), list(s.x), list(s.y), reverse("runs:result_detail", args=[s.result_id]))
        for s in rows
    ]
    threshold = item_thresholds(run, item_key).get("min_busbw_gbps")
    return NcclData(title=f"{item_key}: busbw by message size, run #{run.pk}", curves=curves, threshold=threshold)


# --- burn-in ------------------------------------------------------------------------------------


@dataclass
class Trace:
    gpu: int | None
    x: list[Any]
    y: list[Any]
    points: int  # stored points before downsampling


@dataclass
class ThrottleSpan:
    gpu: int | None
    reason: str
    start: float
    end: float


@dataclass
class BurnInData:
    title: str
    panels: list[tuple[str, str, str, list[Trace]]]  # (series name, label, unit, traces)
    throttles: list[ThrottleSpan]
    slowdown_c: float | None
    max_points: int
    stored_points: int = 0
    drawn_points: int = 0


def burn_in_result(*, result: CheckResult, max_points: int = MAX_POINTS) -> BurnInData:
    """Temperature, power and SM clock per GPU, each trace LTTB-downsampled to `max_points`."""
    names = [name for name, _, _ in BURN_METRICS]
    by_name: dict[str, list[Trace]] = {name: [] for name in names}
    stored = drawn = 0
    for s in Series.objects.filter(result=result, name__in=names).only("name", "gpu", "x", "y").order_by("gpu", "id"):
        x, y = downsample(s.x, s.y, max_points)
        stored += len(s.x)
        drawn += len(x)
        by_name[s.name].append(Trace(gpu=s.gpu, x=x, y=y, points=len(s.x)))
    throttles = [
        ThrottleSpan(gpu=m.gpu, reason=m.text, start=float(m.labels["start_t"]), end=float(m.labels["end_t"]))
        for m in Measurement.objects.filter(result=result, name="throttle_event").only("gpu", "text", "labels")
        if _is_float((m.labels or {}).get("start_t")) and _is_float((m.labels or {}).get("end_t"))
    ]
    panels = [(name, label, unit, by_name[name]) for name, label, unit in BURN_METRICS]
    return BurnInData(
        title=f"{result.item_key} on {result.node.hostname}: telemetry per GPU",
        panels=panels,
        throttles=throttles,
        slowdown_c=slowdown_threshold(result=result),
        max_points=max_points,
        stored_points=stored,
        drawn_points=drawn,
    )


def slowdown_threshold(*, result: CheckResult) -> float | None:
    """The NVML slowdown temperature of the result's node: burn-in does not store it, so it comes
    from the same run's DLC or inventory result on that node (one query), else from the probe
    document in the result's own stdout when it was kept whole. The lowest GPU's value."""
    values = list(
        Measurement.objects.filter(
            result__run_id=result.run_id,
            result__node_id=result.node_id,
            name__in=("slowdown_temp", "gpu_temp_slowdown"),
            value__isnull=False,
        ).values_list("value", flat=True)
    )
    if values:
        return min(values)
    try:
        doc = json.loads(result.stdout) if result.stdout and not result.output_truncated else None
    except ValueError:
        return None
    gpus = ((doc or {}).get("before") or {}).get("gpus") if isinstance(doc, dict) else None
    found = [
        g["temperature"]["slowdown"]
        for g in gpus or []
        if isinstance(g, dict)
        and isinstance(g.get("temperature"), dict)
        and isinstance(g["temperature"].get("slowdown"), (int, float))
    ]
    return float(min(found)) if found else None


def _is_float(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


# --- DLC temperature ----------------------------------------------------------------------------


@dataclass
class DlcData:
    title: str
    gpus: list[int]
    idle: list[float | None]
    load: list[float | None]
    slowdown: list[float | None]
    margin_c: float | None
    sibling_delta: list[float | None]  # load temperature minus the median of the other GPUs
    max_sibling_delta_c: float | None


def dlc_result(*, result: CheckResult) -> DlcData:
    rows = Measurement.objects.filter(
        result=result, name__in=("temp_gpu_steady", "slowdown_temp"), gpu__isnull=False
    ).values_list("name", "gpu", "value", "labels")
    idle: dict[int, float | None] = {}
    load: dict[int, float | None] = {}
    slowdown: dict[int, float | None] = {}
    for name, gpu, value, labels in rows:
        if name == "slowdown_temp":
            slowdown[gpu] = value
        elif (labels or {}).get("phase") == "load":
            load[gpu] = value
        else:
            idle[gpu] = value
    gpus = sorted(set(idle) | set(load) | set(slowdown))
    deltas: list[float | None] = []
    for gpu in gpus:
        others = [v for g, v in load.items() if g != gpu and v is not None]
        value = load.get(gpu)
        deltas.append(value - statistics.median(others) if value is not None and others else None)
    t = item_thresholds(result.run, result.item_key)
    return DlcData(
        title=f"{result.item_key} on {result.node.hostname}: steady GPU temperature, idle and under load",
        gpus=gpus,
        idle=[idle.get(g) for g in gpus],
        load=[load.get(g) for g in gpus],
        slowdown=[slowdown.get(g) for g in gpus],
        margin_c=t.get("min_margin_c"),
        sibling_delta=deltas,
        max_sibling_delta_c=t.get("max_sibling_delta_c"),
    )


# --- ECC / Xid -------------------------------------------------------------------------------------

ECC_COLUMNS = (
    ("ecc_volatile_uncorrected", "volatile uncorr."),
    ("ecc_volatile_corrected", "volatile corr."),
    ("ecc_aggregate_uncorrected", "aggregate uncorr."),
    ("ecc_aggregate_corrected", "aggregate corr."),
    ("remapped_rows_uncorrectable", "remapped rows uncorr."),
    ("remapped_rows_correctable", "remapped rows corr."),
    ("remap_pending", "remap pending"),
    ("remap_failure", "remap failure"),
    ("retired_pages_single_bit", "retired pages SBE"),
    ("retired_pages_double_bit", "retired pages DBE"),
    ("retired_pages_pending", "retired pending"),
)


@dataclass
class EccData:
    columns: list[str]
    rows: list[tuple[int, list[Measurement | None]]]
    xids: list[Measurement] = field(default_factory=list)
    xid_total: int = 0


def ecc_result(*, result: CheckResult, xid_limit: int = 200) -> EccData:
    """Counters per GPU (only the columns present) and the Xid events, most severe first."""
    names = [name for name, _ in ECC_COLUMNS]
    cells: dict[int, dict[str, Measurement]] = {}
    for m in Measurement.objects.filter(result=result, name__in=names, gpu__isnull=False):
        cells.setdefault(m.gpu, {})[m.name] = m
    present = [(n, label) for n, label in ECC_COLUMNS if any(n in c for c in cells.values())]
    rows = [(gpu, [cells[gpu].get(n) for n, _ in present]) for gpu in sorted(cells)]
    xid_qs = Measurement.objects.filter(result=result, name="xid").order_by("id")
    xids = list(xid_qs[:xid_limit])
    return EccData(
        columns=[label for _, label in present],
        rows=rows,
        xids=xids,
        xid_total=len(xids) if len(xids) < xid_limit else xid_qs.count(),
    )


# --- filesystem (run level) --------------------------------------------------------------------


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


def run_filesystem(*, run: Run) -> FsData:
    """Per-node write/read rates of the run's fs_throughput results and the fs_aggregate result
    (per node and total), with the plan's floors. One query."""
    rows = Measurement.objects.filter(
        result__run=run,
        result__kind__in=FS_KINDS,
        name__in=("write_bw_sum", "read_bw_sum", "aggregate_write_bw", "aggregate_read_bw"),
    ).values_list("result__kind", "result__item_key", "result__node__hostname", "name", "value", "labels")
    alone: dict[str, dict[str, float | None]] = {}
    together: dict[str, dict[str, float | None]] = {}
    aggregate: dict[str, float | None] = {}
    items: dict[str, str] = {}
    for kind, item_key, hostname, name, value, labels in rows:
        items[kind] = item_key
        gbps = None if value is None else value / 1e9
        ddir = "write" if "write" in name else "read"
        labels = labels or {}
        if kind == "fs_throughput" and not labels:
            alone.setdefault(hostname, {})[ddir] = gbps
        elif kind == "fs_aggregate" and name.startswith("aggregate_"):
            aggregate[ddir] = gbps
        elif kind == "fs_aggregate" and labels.get("node") and "job" not in labels:
            together.setdefault(labels["node"], {})[ddir] = gbps
    nodes = sorted(set(alone) | set(together), key=_natural)
    node_t = item_thresholds(run, items.get("fs_throughput", ""))
    agg_t = item_thresholds(run, items.get("fs_aggregate", ""))
    return FsData(
        title=f"Filesystem throughput, run #{run.pk}",
        nodes=nodes,
        write=[alone.get(n, {}).get("write") for n in nodes],
        read=[alone.get(n, {}).get("read") for n in nodes],
        concurrent_write=[together.get(n, {}).get("write") for n in nodes],
        concurrent_read=[together.get(n, {}).get("read") for n in nodes],
        aggregate_write=aggregate.get("write"),
        aggregate_read=aggregate.get("read"),
        min_write=node_t.get("min_write_gbps"),
        min_read=node_t.get("min_read_gbps"),
        min_aggregate_write=agg_t.get("min_aggregate_write_gbps"),
        min_aggregate_read=agg_t.get("min_aggregate_read_gbps"),
        has_aggregate=bool(together or aggregate),
    )


# --- fleet distribution (run level) ----------------------------------------------------------------

# Per-GPU metrics become one point per node: the worst GPU. For these names "worst" is the highest
# (heat, errors, latency); for everything else (bandwidth, Gflop/s, clocks) it is the lowest.
_HIGHER_IS_WORSE = re.compile(r"temp|error|ecc|xid|remap|retired|lat|wrong|pending|throttle|slowdown|failure|power")


def worst_aggregate(metric: str) -> str:
    """'max' or 'min': how a per-GPU metric is reduced to one value per node."""
    return "max" if _HIGHER_IS_WORSE.search(metric) else "min"


@dataclass
class MetricChoice:
    item_key: str
    name: str
    phase: str
    unit: str

    @property
    def pick(self) -> str:
        return f"{self.item_key}|{self.name}|{self.phase}"

    @property
    def label(self) -> str:
        phase = f" ({self.phase})" if self.phase else ""
        unit = f" [{self.unit}]" if self.unit else ""
        return f"{self.item_key}: {self.name}{phase}{unit}"


def run_metric_choices(*, run: Run) -> list[MetricChoice]:
    """The (check, metric, phase) triples with numbers in this run: one query (DISTINCT)."""
    rows = (
        Measurement.objects.filter(result__run=run, value__isnull=False)
        .values_list("result__item_key", "name", "labels__phase", "unit")
        .distinct()
    )
    seen: dict[tuple[str, str, str], MetricChoice] = {}
    for item_key, name, phase, unit in rows:
        phase = phase if isinstance(phase, str) else ""
        key = (item_key, name, phase)
        if key not in seen:
            seen[key] = MetricChoice(item_key, name, phase, unit or "")
    order = {item.get("key"): i for i, item in enumerate(run.plan_snapshot.get("items", []))}
    return sorted(seen.values(), key=lambda c: (order.get(c.item_key, 99), c.name, c.phase))


@dataclass
class Point:
    node: str
    value: float
    gpu: int | None = None
    z: float | None = None

    median: float | None = None

    @property
    def outlier(self) -> bool:
        """|robust z| > 3.5 and at least 5 % off the median (portal/runs/outliers.py's guard: a
        very tight fleet has a tiny MAD, and a 1 % wobble is nobody's straggler)."""
        if self.z is None or abs(self.z) <= OUTLIER_Z:
            return False
        return self.median is None or abs(self.value - self.median) >= MIN_DEVIATION * abs(self.median)


@dataclass
class Distribution:
    title: str
    item_key: str
    metric: str
    phase: str
    unit: str
    per: str  # "node" or "gpu"
    aggregate: str  # how GPUs were reduced per node ("" when per GPU or node-level)
    points: list[Point]
    threshold: str = ""
    z_limit: float = OUTLIER_Z

    @property
    def outliers(self) -> list[Point]:
        return [p for p in self.points if p.outlier]


def run_metric_values(*, run: Run, item_key: str, metric: str, phase: str = "") -> list[dict[str, Any]]:
    """Raw (node, gpu, value, labels, unit, threshold) rows of one metric in a run: one query. Group
    results count only where a measurement names its node (labels['node'])."""
    qs = Measurement.objects.filter(result__run=run, result__item_key=item_key, name=metric, value__isnull=False)
    if phase:
        qs = qs.filter(labels__phase=phase)
    out = []
    for value, gpu, labels, unit, threshold, hostname, scope in qs.values_list(
        "value", "gpu", "labels", "unit", "threshold", "result__node__hostname", "result__scope"
    ):
        labels = labels or {}
        if "job" in labels:  # fio per-job rows: the *_sum rows carry the node's figure
            continue
        node = labels.get("node") if scope == Scope.GROUP else hostname
        if not node:
            continue
        out.append({"node": node, "gpu": gpu, "value": value, "unit": unit, "threshold": threshold})
    return out


def run_distribution(*, run: Run, item_key: str, metric: str, phase: str = "", per: str = "node") -> Distribution:
    rows = run_metric_values(run=run, item_key=item_key, metric=metric, phase=phase)
    per_gpu = any(r["gpu"] is not None for r in rows)
    how = worst_aggregate(metric) if per_gpu and per != "gpu" else ""
    if per_gpu and per == "gpu":
        points = [Point(r["node"], r["value"], r["gpu"]) for r in rows]
    else:
        by_node: dict[str, list[float]] = {}
        for r in rows:
            by_node.setdefault(r["node"], []).append(r["value"])
        reduce = max if how == "max" else min
        points = [Point(node, reduce(values) if how else values[0]) for node, values in by_node.items()]
    points.sort(key=lambda p: (_natural(p.node), p.gpu if p.gpu is not None else -1))
    median = statistics.median([p.value for p in points]) if points else None
    for point, z in zip(points, robust_z([p.value for p in points]), strict=True):
        point.z, point.median = z, median
    unit = next((r["unit"] for r in rows if r["unit"]), "")
    # A threshold line only when every row was judged against the same one (sibling-relative
    # floors differ per node).
    thresholds = {r["threshold"] for r in rows}
    threshold = thresholds.pop() if len(thresholds) == 1 else ""
    phase_text = f" ({phase})" if phase else ""
    per_text = " per GPU" if per_gpu and per == "gpu" else (f", {how} over GPUs per node" if how else " per node")
    return Distribution(
        title=f"{item_key}: {metric}{phase_text}{per_text}, run #{run.pk}",
        item_key=item_key,
        metric=metric,
        phase=phase,
        unit=unit,
        per="gpu" if per_gpu and per == "gpu" else "node",
        aggregate=how,
        points=points,
        threshold=threshold,
    )


# --- rack heatmap (run level) -------------------------------------------------------------------


@dataclass
class RackCell:
    node: str
    rack: str
    position: str
    status: str
    value: float | None
    url: str


@dataclass
class RackData:
    title: str
    metric: str  # "status" or "check:metric"
    unit: str
    cells: list[RackCell]


UNRACKED = "unracked"


def node_statuses(*, run: Run) -> dict[int, tuple[str, int]]:
    """Each node's worst status in the run and the result that carries it (node id -> (status,
    result pk)). Group results count for a node through its attribution, else as members. One query."""
    from checks.base import worst_status

    rows = CheckResult.objects.filter(run=run).values_list(
        "pk", "node_id", "node__hostname", "status", "scope", "node_set", "attribution"
    )
    per_node: dict[int, list[tuple[str, int]]] = {}
    by_host: dict[str, int] = {}
    groups = []
    for pk, node_id, hostname, status, scope, node_set, attribution in rows:
        by_host[hostname] = node_id
        if scope == Scope.GROUP:
            groups.append((pk, status, node_set, attribution or {}))
        else:
            per_node.setdefault(node_id, []).append((status, pk))
    for pk, status, node_set, attribution in groups:
        members = set(NodeSet(node_set)) if node_set else set()
        for hostname, node_id in by_host.items():
            if hostname in attribution:
                per_node.setdefault(node_id, []).append((attribution[hostname].get("status", status), pk))
            elif hostname in members:
                per_node.setdefault(node_id, []).append((status, pk))
    out = {}
    for node_id, cells in per_node.items():
        worst = worst_status([s for s, _ in cells])
        out[node_id] = (worst, next(pk for s, pk in cells if s == worst))
    return out


def run_rack(*, run: Run, metric: str = "status") -> RackData:
    """Each node of the run with its rack, position, worst status, and (for a metric) its value.
    Three queries at most, whatever the node count."""
    from django.urls import reverse

    statuses = node_statuses(run=run)
    values: dict[str, float] = {}
    unit = ""
    if metric != "status":
        item_key, _, rest = metric.partition(":")
        name, _, phase = rest.partition("@")
        dist = run_distribution(run=run, item_key=item_key, metric=name, phase=phase)
        values = {p.node: p.value for p in dist.points}
        unit = dist.unit
    nodes = Node.objects.filter(pk__in=list(statuses)).values_list("pk", "hostname", "rack", "position")
    cluster_name = run.cluster.name
    cells = []
    for pk, hostname, rack, position in nodes:
        status, result_pk = statuses[pk]
        cells.append(
            RackCell(
                node=hostname,
                rack=rack or UNRACKED,
                position=position or "",
                status=status,
                value=values.get(hostname),
                url=node_results_url(
                    cluster=cluster_name, hostname=hostname, fallback=reverse("runs:result_detail", args=[result_pk])
                ),
            )
        )
    title = "worst status" if metric == "status" else metric.replace("@", " ")
    return RackData(title=f"Racks by {title}, run #{run.pk}", metric=metric, unit=unit, cells=cells)


def node_results_url(*, cluster: str, hostname: str, fallback: str) -> str:
    """The node's history page (portal/history) when it is there, else `fallback` (the node's
    worst result in this run)."""
    from django.urls import NoReverseMatch, reverse

    try:
        return reverse("history:node_detail", args=[cluster, hostname])
    except NoReverseMatch:
        return fallback


# --- run page links -------------------------------------------------------------------------------


@dataclass
class RunChartLink:
    label: str
    url: str


def run_chart_links(*, run: Run) -> list[RunChartLink]:
    """Links to the run-level charts that have data in this run: one query."""
    from django.urls import reverse

    kinds = dict(
        Series.objects.filter(result__run=run, name="busbw").values_list("result__item_key", "result__kind").distinct()
    )
    fs = Measurement.objects.filter(result__run=run, result__kind__in=FS_KINDS).exists()
    links = [
        RunChartLink(f"NCCL busbw ({key})", reverse("charts:run_nccl", args=[run.pk]) + f"?check={key}")
        for key in sorted(kinds)
    ]
    if fs:
        links.append(RunChartLink("Filesystem", reverse("charts:run_filesystem", args=[run.pk])))
    links.append(RunChartLink("Fleet distribution", reverse("charts:run_distribution", args=[run.pk])))
    links.append(RunChartLink("Rack heatmap", reverse("charts:run_rack", args=[run.pk])))
    return links


# --- export --------------------------------------------------------------------------------------


def result_series(*, result: CheckResult) -> Iterator[Series]:
    """Every stored series of a result, whole, one row at a time (exports)."""
    return Series.objects.filter(result=result).order_by("name", "gpu", "id").iterator(chunk_size=8)


def series_csv_lines(*, result: CheckResult) -> Iterator[str]:
    """Long-format CSV, one line per point: series,gpu,labels,x,x_unit,y,unit. Generated lazily so
    a 24 h burn-in streams instead of being built in memory."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(row: Iterable[Any]) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(row)
        return buffer.getvalue()

    yield line(["series", "gpu", "labels", "x", "x_unit", "y", "unit"])
    for s in result_series(result=result):
        labels = ";".join(f"{k}={v}" for k, v in sorted((s.labels or {}).items()))
        gpu = "" if s.gpu is None else s.gpu
        chunk = [
            line([s.name, gpu, labels, x, s.x_unit, "" if y is None else y, s.unit])
            for x, y in zip(s.x, s.y, strict=False)
        ]
        yield "".join(chunk)


def _natural(text: str) -> list[Any]:
    """gpu2 before gpu10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]
