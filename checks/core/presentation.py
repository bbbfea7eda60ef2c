"""How a check kind is shown: the one declaration the portal reads (charts, history, /metrics,
health trends, fleet outliers, certificate). Pure Python, no Django.

A check class sets `presentation: ClassVar[Presentation]` beside its thresholds; the portal looks
it up through the registry (`checks.presentation_of`, `checks.presented`) and keeps no table of kinds of its own.
A kind that declares nothing gets `Presentation()`: no chart, no key metric, nothing exported.
See docs/adding-a-check.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# A stored measurement as the portal hands it over (a Measurement row as values()).
Row = Mapping[str, Any]

# Chart families the portal can draw for one result (portal/charts/families.py); "" = no chart. Each
# family is a generic renderer and reads only the names its declaration gives: "nccl" the `curves`
# series by x against `series_threshold`, "burn_in" the `telemetry` panels, "dlc" the `phase_bars`,
# "filesystem" the run's `throughput`, "ecc" the `counters` table, "capacity" (a whole-cluster power
# and cooling result, drawn on the cluster's capacity page) the `capacity` layout, "matrix" one
# heatmap per `MatrixChart` in `matrices`. A family and its declaration go together.
CHART_FAMILIES = ("", "nccl", "burn_in", "dlc", "filesystem", "ecc", "capacity", "matrix")
# How a matrix colours its cells: "value" by the distance from each cell's recorded threshold (">= 360":
# red short of it, blue past it), or on a scale from 0 where the cells have no such threshold
# (bandwidth, latency); "rank" one colour per rank of an ordinal scale, nearest first (a link distance),
# named by `MatrixChart.ranks`.
MATRIX_COLOURS = ("value", "rank")

# A group check that judges subjects of its own besides its nodes (a rack, a PDU phase, a cooling
# loop) records one measurement of this name per subject: value None, `text` the subject's reason,
# labels {"subject": kind, "subject_name": name, "status": pass|warn|fail|error} plus the labels
# that place it (rack, pdu, phase, ups, loop). A node's own verdict stays in the result's attribution.
SUBJECT_VERDICT = "subject_verdict"


@dataclass(frozen=True)
class KeyMetric:
    """A measurement followed across runs (node history, run comparison). `better` is the direction
    of a good change; per-GPU values fold into one number per node with `gpu_agg` (the worst GPU,
    or the sum of counts). `labels` must all match (phase=load). `scale` turns the stored unit into
    `unit`. Two kinds declaring the same `key` share one chart (NCCL on one node and across nodes)."""

    key: str
    label: str
    name: str
    unit: str
    better: str = "higher"
    scale: float = 1.0
    per_gpu: bool = False
    gpu_agg: str = "min"
    labels: tuple[tuple[str, str], ...] = ()
    # Changes smaller than this (relative, %) are noise, not "worse"; counts have no tolerance.
    tolerance_pct: float = 2.0
    # Group-level values (no host label) on a node's own page: a multi-node busbw is worth seeing
    # there; the filesystem aggregate total is not (it dwarfs the node's own bandwidth).
    group_value_on_node: bool = False
    # One of the metrics the fleet distribution page opens on when none is asked for.
    fleet_default: bool = False


@dataclass(frozen=True)
class TrendRule:
    """A key measurement that must not drift the bad way across sweeps (portal/health/trends.py)."""

    name: str
    direction: int  # +1: rising is bad; -1: falling is bad
    min_change: float  # absolute, or a fraction of the first value when `relative`
    relative: bool
    label: str
    unit: str


@dataclass(frozen=True)
class PromMetric:
    """A measurement exported on /metrics (the node's latest finished result of the kind), labelled
    cluster, node, gpu and, when `label` is set, `label` = `label_value`, or the measurement's own
    label of that name when `label_value` is None (phase)."""

    measurement: str
    metric: str
    help: str
    label: str = ""
    label_value: str | None = ""


@dataclass(frozen=True)
class OutlierMetric:
    """A key metric compared across the nodes of one run (portal/runs/outliers.py)."""

    key: str  # labels the outlier_z measurement
    label: str  # how the reason names it
    names: tuple[str, ...]  # the measurement names it reads
    unit: str
    low_is_bad: bool
    read: Callable[[Iterable[Row]], float | None]
    scale: float = 1.0  # stored unit -> shown unit (B/s -> GB/s)


@dataclass(frozen=True)
class CertificateChart:
    """A static chart in the certificate PDF (portal/certificates/charts.py).

    style "curves": each node's stored series `names[0]` (x against y), `threshold` (a threshold
    field of the plan item) drawn dashed. style "bars": one trace per measurement name, one bar per
    node (per node/GPU when the values are per GPU), values divided by `scale`. Past a readable
    count (portal/certificates/charts.py MAX_CURVES, MAX_BARS) curves become the band from the
    lowest to the highest node with the median, and bars a histogram of the values."""

    title: str
    style: str
    names: tuple[str, ...]
    y_title: str
    x_title: str = ""
    log_x: bool = False
    threshold: str = ""
    scale: float = 1.0
    grouped: bool = False  # bars side by side per node (several names)


@dataclass(frozen=True)
class SubjectKind:
    """A kind of subject a group check judges apart from its nodes: `key` is the `subject` label of
    its SUBJECT_VERDICT rows ("rack", "pdu_phase"), `title` how a list of them is headed."""

    key: str
    title: str


@dataclass(frozen=True)
class CertificateSection:
    """A section of its own in the certificate for a cited group result of the kind: its verdict, each
    subject's verdict and reason by kind (SUBJECT_VERDICT rows, in the order of `subjects`), and, with
    `figures`, the static figures of the kind's chart family (portal/certificates/charts.py)."""

    title: str
    subjects: tuple[SubjectKind, ...]
    figures: bool = True


@dataclass(frozen=True)
class SeriesThreshold:
    """Where a series chart (x against y, e.g. busbw by message size) finds its threshold: the bound
    recorded on the result's measurement `measurement` (its `threshold`, ">= 460"), the one the
    check judged. `x_from` names that measurement's label holding the smallest x the judgement
    covers (NCCL judges busbw only on sizes >= `peak_min_bytes`): the line is drawn from there to
    the largest x, not across sizes the check never judged. '' = every x."""

    measurement: str
    x_from: str = ""


@dataclass(frozen=True)
class MatrixChart:
    """A heatmap of one result's measurements (chart family "matrix"): a row per value of the label
    `rows_label` ("gpu": the measurement's GPU index), a column per value of `cols_label`, or, when
    `cols_label` is "", a column per name of `measurements` (titled by `column_titles`, else the name);
    the cell is the measurement's value, its `text` shown in the cell when `text_field`, its threshold
    and any other labels in the hover. A cell whose measurement is out of spec (`ok` False) is marked,
    and so are the cells a not-ok measurement named `marks` points at (same row label; its
    `cols_label` may list several columns, comma separated: a GPU's nearest NICs). Large matrices are
    cut to the first rows and columns in natural order, with a note (portal/charts/selectors/matrix.py)."""

    title: str
    measurements: tuple[str, ...]
    rows_label: str
    cols_label: str = ""
    unit: str = ""
    colour_by: str = "value"
    text_field: bool = True
    marks: str = ""
    rows_title: str = ""  # the axis titles; the label's name when empty
    cols_title: str = ""
    column_titles: tuple[str, ...] = ()
    ranks: tuple[str, ...] = ()  # colour_by "rank": the name of each rank, 0 first

    def __post_init__(self) -> None:
        if not self.measurements or not self.rows_label:
            raise ValueError(f"matrix {self.title!r}: measurements and rows_label are required")
        if self.colour_by not in MATRIX_COLOURS:
            raise ValueError(f"matrix {self.title!r}: unknown colour_by {self.colour_by!r}")
        if self.colour_by == "rank" and not self.ranks:
            raise ValueError(f"matrix {self.title!r}: colour_by 'rank' names its ranks")
        if self.cols_label and len(self.measurements) > 1:
            raise ValueError(f"matrix {self.title!r}: several measurements are the columns (cols_label '')")
        if self.column_titles and len(self.column_titles) != len(self.measurements):
            raise ValueError(f"matrix {self.title!r}: one column title per measurement")


@dataclass(frozen=True)
class FleetMetric:
    """How a measurement compares across nodes (fleet distribution, rack heatmap) where no key metric
    of the kind says (it wins over an outlier's or a trend's direction, which give no folding of
    their own): `better` "higher" or "lower", and how a node's GPUs fold into its one value
    (`gpu_agg`: "min" or "max", the worst GPU, or "sum" for counts)."""

    name: str
    better: str = "higher"
    gpu_agg: str = "min"


BETTER = ("higher", "lower")
GPU_FOLDS = ("min", "max", "sum")


@dataclass(frozen=True)
class TelemetryPanel:
    """One panel of a telemetry chart (family "burn_in"): the stored series `series`, one trace per
    GPU (per node when stored without a GPU), titled `label` in `unit`. An `optional` panel is drawn
    only when the result has such a series."""

    series: str
    label: str
    unit: str
    optional: bool = False


@dataclass(frozen=True)
class TelemetryChart:
    """The telemetry of one result (family "burn_in"): its `panels`, in order, the spans of the
    measurement `spans` (labels start_t and end_t, the text its reason) shaded and marked on top of
    `spans_panel`, and a line at the lowest value of the `limit` measurements recorded on the node in
    the same run (any kind)."""

    panels: tuple[TelemetryPanel, ...]
    spans: str = ""
    limit: tuple[str, ...] = ()
    spans_panel: str = ""  # the panel whose top carries the spans' markers (the last when "")


@dataclass(frozen=True)
class CounterTable:
    """A per-GPU table of counters and a list of events (family "ecc"): `columns` (measurement,
    column title) in order, one row per GPU; `events` the measurements listed one per line, most
    severe first. The result page's own measurement table leaves both out."""

    columns: tuple[tuple[str, str], ...]
    events: tuple[str, ...] = ()

    def shows(self, name: str, gpu: int | None) -> bool:
        """Whether the table shows this measurement: every event, and a counter measured on one GPU
        (a node-level counter has no row here, so the result page's own table keeps it)."""
        return name in self.events or (gpu is not None and any(name == column for column, _ in self.columns))


@dataclass(frozen=True)
class PhaseBars:
    """Per-GPU bars of one measurement by its `phase` label, idle and `load` (family "dlc"), against
    the per-GPU `limit` measurement, with each GPU's load value against its siblings' median.
    `margin` and `sibling` name the plan thresholds drawn as the allowed margin and delta."""

    measurement: str
    limit: str
    load: str = "load"
    margin: str = ""
    sibling: str = ""


@dataclass(frozen=True)
class ThroughputChart:
    """Write and read rates per node (family "filesystem"), in B/s: `write`/`read` each node's own
    total (the row without labels; a group check's rows name the node), `total_write`/`total_read`
    the group's whole total. `min_write`/`min_read` name the plan thresholds (GB/s) drawn as floors."""

    write: str
    read: str
    total_write: str = ""
    total_read: str = ""
    min_write: str = ""
    min_read: str = ""


@dataclass(frozen=True)
class CapacityMeasure:
    """A measurement the capacity page reads (family "capacity"): of which subject kind ("node",
    "rack", "pdu_phase", "feed", "ups", "loop") and under which `role` the page shows it."""

    subject: str
    role: str
    name: str


@dataclass(frozen=True)
class CapacityLayout:
    """What the capacity page reads of a result (family "capacity"): its measurements by subject and
    role, the cluster's power series and the per-rack power series (label rack)."""

    measures: tuple[CapacityMeasure, ...]
    cluster_series: str
    rack_series: str


# What to do about a fault, one wording per idea (the triage view, its CSV and RMA text). A check
# names the remedy of its out-of-spec measurements with these; the Xid catalogue (checks/gpu/xid.py)
# words its own actions per code.
RMA = "RMA: replace the GPU (uncorrectable memory errors do not heal)"
RESEAT_LINK = "reseat or replace the cable or HCA (PCIe: reseat the card), then re-run"
COLD_PLATE = "check the cold plate and the coolant loop (flow, inlet temperature, leaks)"
REINSTALL_DRIVER = "reinstall the pinned driver (re-image the node to the cluster's pinned software)"
RESET_GPU = "reset the GPU (nvidia-smi -r) to apply the pending remap, then re-run"
ENABLE_ECC = "enable ECC (nvidia-smi -e 1) and reboot"
# gpu_burn compares each GPU's results with a reference: a mismatch is the GPU computing wrong.
REPLACE_FAULTY_GPU = "RMA: replace the GPU (it computed wrong results under load: gpu_burn errors or FAULTY)"
GPU_MISSING = "reseat the GPU that is missing or not the profile's model; RMA if it stays missing"
LOOK_AT_RESULT = "read the result's evidence, fix the node, then re-run"
# An `error` result: Kiln could not tell (the check never ran to a verdict). Every kind shares these:
# one for a node that gave nothing back (unreachable, no answer), one for a node whose answer could
# not be judged (a tool missing or failing, output unparseable, readings incomplete).
COULD_NOT_TELL = "could not tell: check SSH to the node (sshd running, network and route, credentials), then re-run"
COULD_NOT_JUDGE = (
    "could not tell from what the node returned: fix what the reason names (the tool, its output, the readings "
    "it lacked), then re-run"
)


@dataclass(frozen=True)
class Remedy:
    """What to do when the kind's measurement `names` (none: any, the kind's fallback) is out of spec.
    `cause` names the fault across kinds ("ecc", "software", "link"): one node's lines of the same
    cause and action merge (a wrong driver fails the inventory and the software check). `action_of`
    words the action from the measurement row itself (the Xid catalogue's per-code action)."""

    cause: str
    action: str
    names: tuple[str, ...] = ()
    action_of: Callable[[Row], str] | None = None

    def action_for(self, row: Row | None) -> str:
        return self.action_of(row) if self.action_of is not None and row is not None else self.action


FALLBACK_REMEDY = Remedy("other", LOOK_AT_RESULT)
ERROR_REMEDY = Remedy("could not tell", COULD_NOT_TELL)
UNJUDGED_REMEDY = Remedy("could not tell", COULD_NOT_JUDGE)


# What part of a node a hardware identity names (HardwareIdentity.part), and how a report names one.
HARDWARE_PARTS = ("chassis", "GPU", "NIC", "PSU")


@dataclass(frozen=True)
class HardwareIdentity:
    """A text measurement that names a physical part of the node, sealed per node in the
    certificate and read again from the live node by `kiln verify --against`. `part` is one of
    HARDWARE_PARTS; `field` what the text is ("serial", "uuid", "guid", "vbios", "firmware"); `key`
    tells parts of one kind apart: "gpu" the measurement's GPU index, another word the label of
    that name ("ca": mlx5_0), "" one part per node. A field that `identifies` the part (a serial,
    a UUID, a GUID) differing means another part is in its place; one that does not (firmware)
    means the same part changed."""

    measurement: str
    part: str
    field: str
    key: str = ""
    identifies: bool = True

    def __post_init__(self) -> None:
        if self.part not in HARDWARE_PARTS:
            raise ValueError(f"hardware identity {self.measurement!r}: unknown part {self.part!r}")


@dataclass(frozen=True)
class Presentation:
    """Everything the portal shows of one check kind. `rank` orders kinds on pages that list several
    (history charts, certificate charts): lower first."""

    chart: str = ""
    rank: int = 100
    key_metrics: tuple[KeyMetric, ...] = ()
    trends: tuple[TrendRule, ...] = ()
    prometheus: tuple[PromMetric, ...] = ()
    outliers: tuple[OutlierMetric, ...] = ()
    certificate_charts: tuple[CertificateChart, ...] = ()
    # Per-GPU text measurement -> field of the certificate's GPU identity ({"gpu_uuid": "uuid"}).
    gpu_identity: tuple[tuple[str, str], ...] = ()
    # The hardware identities a node's result of the kind names (the certificate seals them per node).
    hardware: tuple[HardwareIdentity, ...] = ()
    # Per-GPU text measurement holding the GPU's PCI bus id (triage view, RMA text).
    gpu_bus_id: str = ""
    # What to do when the kind fails (the triage view): the first remedy naming the measurement, else
    # the first one naming none, else FALLBACK_REMEDY.
    remedies: tuple[Remedy, ...] = ()
    # A group check whose subjects (racks, PDUs, loops) get a certificate section of their own.
    certificate_section: CertificateSection | None = None
    # Chart family "matrix": the heatmaps of a result, in order (declared with that family only).
    matrices: tuple[MatrixChart, ...] = ()
    # Series charts (family "nccl"): the stored series drawn (x against y), and the threshold each
    # result's curve is drawn against.
    curves: str = ""
    series_threshold: SeriesThreshold | None = None
    # What the other families draw (one each, declared with its family only).
    telemetry: TelemetryChart | None = None
    counters: CounterTable | None = None
    phase_bars: PhaseBars | None = None
    throughput: ThroughputChart | None = None
    capacity: CapacityLayout | None = None
    # Fleet comparison (distribution, rack heatmap) of fleet metrics no key metric gives a direction
    # and a per-GPU folding (`direction`).
    fleet: tuple[FleetMetric, ...] = ()
    # Measurement name -> how people read it (the certificate's tables and charts). A name declared
    # nowhere reads in words (portal/formatting.py name_label: "ecc_enabled" -> "ECC enabled").
    measurement_labels: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.chart not in CHART_FAMILIES:
            raise ValueError(f"unknown chart family {self.chart!r}; known: {', '.join(CHART_FAMILIES[1:])}")
        if bool(self.matrices) != (self.chart == "matrix"):
            raise ValueError("chart family 'matrix' and `matrices` go together: declare both or neither")
        for chart in self.certificate_charts:
            if chart.style not in ("curves", "bars"):
                raise ValueError(f"certificate chart {chart.title!r}: unknown style {chart.style!r}")
        for family, declared in self._family_parts().items():
            if bool(declared) != (self.chart == family):
                raise ValueError(f"chart family {family!r} and its declaration go together: declare both or neither")
        for m in self.fleet:
            if m.better not in BETTER or m.gpu_agg not in GPU_FOLDS:
                raise ValueError(f"fleet metric {m.name!r}: better in {BETTER}, gpu_agg in {GPU_FOLDS}")

    def _family_parts(self) -> dict[str, object]:
        """Each family's own declaration: a kind draws with a family exactly when it declares it."""
        return {
            "nccl": self.curves,
            "burn_in": self.telemetry,
            "ecc": self.counters,
            "dlc": self.phase_bars,
            "filesystem": self.throughput,
            "capacity": self.capacity,
        }

    def label_of(self, name: str) -> str:
        """The label declared for measurement `name`, '' when none is. A key metric's label is not
        used: it names one value folded per node ("slowest GPU"), not the measurement itself."""
        return next((label for declared, label in self.measurement_labels if declared == name), "")

    def charted_names(self) -> frozenset[str]:
        """Every measurement and series name the kind's charts read (the portal holds none of its own)."""
        names: set[str] = {self.curves} if self.curves else set()
        if self.series_threshold is not None:
            names.add(self.series_threshold.measurement)
        for matrix in self.matrices:
            names |= {*matrix.measurements, matrix.marks}
        if self.telemetry is not None:
            names |= {p.series for p in self.telemetry.panels} | {self.telemetry.spans, *self.telemetry.limit}
        if self.counters is not None:
            names |= {n for n, _ in self.counters.columns} | set(self.counters.events)
        if self.phase_bars is not None:
            names |= {self.phase_bars.measurement, self.phase_bars.limit}
        if self.throughput is not None:
            t = self.throughput
            names |= {t.write, t.read, t.total_write, t.total_read}
        if self.capacity is not None:
            names |= {m.name for m in self.capacity.measures}
            names |= {self.capacity.cluster_series, self.capacity.rack_series}
        names |= {n for c in self.certificate_charts for n in c.names}
        return frozenset(names - {""})

    def direction(self, name: str) -> FleetMetric | None:
        """How `name` compares across nodes: a key metric's direction and folding, else the kind's
        `fleet` entry, else an outlier's or a trend's direction (the worst GPU by it). None: not
        declared (tests/checks hold every fleet metric to one)."""
        for km in self.key_metrics:
            if km.name == name:
                return FleetMetric(name, km.better, km.gpu_agg)
        for m in self.fleet:
            if m.name == name:
                return m
        for o in self.outliers:
            if name in o.names:
                return FleetMetric(name, "higher", "min") if o.low_is_bad else FleetMetric(name, "lower", "max")
        for t in self.trends:
            if t.name == name:
                return FleetMetric(name, "lower", "max") if t.direction > 0 else FleetMetric(name, "higher", "min")
        return None

    def fleet_metrics(self) -> frozenset[str]:
        """The measurement names worth comparing across a run's nodes (the fleet distribution and
        rack heatmap pickers): those the kind declares as judged and followed (key metrics, trends,
        outliers, exported gauges, certificate bars). Evidence bookkeeping (exit codes, presence
        flags, versions) is recorded but never offered."""
        names = {m.name for m in self.key_metrics} | {t.name for t in self.trends}
        names |= {n for o in self.outliers for n in o.names} | {p.measurement for p in self.prometheus}
        names |= {n for c in self.certificate_charts if c.style == "bars" for n in c.names}
        return frozenset(names)

    def remedy_for(self, name: str | None) -> Remedy:
        """The remedy of an out-of-spec measurement `name` (None: a failed result with none)."""
        named = [r for r in self.remedies if name is not None and name in r.names]
        general = [r for r in self.remedies if not r.names]
        return (named or general or [FALLBACK_REMEDY])[0]


NOTHING = Presentation()


# --- readers for outlier metrics: a node's one value from its measurements ------------------------


def _values(rows: Iterable[Row], name: str, labels: Mapping[str, str]) -> list[float]:
    return [
        float(r["value"])
        for r in rows
        if r["name"] == name
        and r["value"] is not None
        and all((r.get("labels") or {}).get(k) == v for k, v in labels.items())
    ]


def highest(name: str, **labels: str) -> Callable[[Iterable[Row]], float | None]:
    """The largest value of `name` (with `labels`): the hottest GPU, the best size's busbw."""

    def read(rows: Iterable[Row]) -> float | None:
        values = _values(rows, name, labels)
        return max(values) if values else None

    return read


def lowest(name: str, **labels: str) -> Callable[[Iterable[Row]], float | None]:
    """The smallest value of `name`: the slowest GPU sets the node's pace in a synchronous job."""

    def read(rows: Iterable[Row]) -> float | None:
        values = _values(rows, name, labels)
        return min(values) if values else None

    return read


def total_else_sum(total: str, part: str) -> Callable[[Iterable[Row]], float | None]:
    """The node's total `total` (the row without a job label, the value its threshold judges), else
    the sum of the per-job `part` rows (checks/fs/throughput.py)."""

    def read(rows: Iterable[Row]) -> float | None:
        rows = list(rows)
        sums = [
            float(r["value"])
            for r in rows
            if r["name"] == total and r["value"] is not None and "job" not in (r.get("labels") or {})
        ]
        if sums:
            return sums[0]
        parts = _values(rows, part, {})
        return sum(parts) if parts else None

    return read
