"""A cluster's capacity page: its latest finished whole-cluster power and cooling result (chart family
"capacity", checks/core/presentation.py) read into plain data for
portal/charts/figures/capacity.py and the charts/capacity.html template.

What a result of the family records (its contract with this module): the measurements its kind
declares (checks/core/presentation.py CapacityLayout), each labelled by its subject (KEYS) and read under
its declared role (a rack's "peak" with its threshold "<= BUDGET W", a UPS's "capacity" with
">= REQUIRED W" and "load", a PDU phase's "current" with "<= LIMIT A", a loop's "capture" with
">= MIN", ...); one SUBJECT_VERDICT row per subject other than a node; each node's verdict in the
attribution; the declared cluster power series (W over s) and per-rack series (label rack).

A result is read in two queries whatever its node count (its measurements, its series), plus one for
the rack positions when a lookup is given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import quote

from django.db.models import F, QuerySet
from django.urls import reverse

from checks import kinds_charted, presentation_of
from checks.core.presentation import SUBJECT_VERDICT, CapacityLayout
from portal.inventory.models import Cluster
from portal.ordering import natural_key as natural
from portal.runs.models import CheckResult, Measurement, Scope, Series, Status

FAMILY = "capacity"
# Results that carry evidence: a cancelled or skipped soak measured nothing.
FINISHED = (Status.PASS, Status.WARN, Status.FAIL, Status.ERROR)
RESULTS_LISTED = 50  # soaks offered by the picker: a year of weekly soaks (Kiln convention)

# Subject kind -> the labels that name one subject.
KEYS = {
    "node": ("node",),
    "rack": ("rack",),
    "pdu_phase": ("pdu", "phase"),
    "feed": ("rack", "feed"),
    "ups": ("ups",),
    "loop": ("loop",),
}
# A rack's peak against its budget: at most 80% is the headroom a continuous load keeps on its
# circuits (NEC 210.19(A)(1)/210.20(A), the same rule the soak applies to breakers); above 100% it
# is over budget.
HEADROOM_FRAC = 0.8
# Racks per row when no position is known: a row of 12 cells fits a 1,400 px page (Kiln convention).
PER_ROW = 12
# Worst first: fail (a proven fault), error (could not tell), warn, pass (checks/core/verdict.py's
# order); none recorded first.
SEVERITY = {"": 5, "fail": 4, "error": 3, "warn": 2, "pass": 1}

Key = tuple[str, ...]
Row = Mapping[str, Any]
Place = tuple[str, str, str]  # room, row, position


class RackPositions(Protocol):
    """Where each rack of a cluster stands: rack name -> (room, row, position)."""

    def __call__(self, *, cluster: Cluster) -> Mapping[str, tuple[Any, Any, Any]]: ...


def facility_rack_positions(*, cluster: Cluster) -> Mapping[str, tuple[Any, Any, Any]]:
    """The racks of the cluster's facility model (portal/facility): name -> (room, row, position).
    Empty when it has none: the page then lays the racks out in name order. One query."""
    from portal.facility.models import Rack

    rows = Rack.objects.filter(cluster=cluster).order_by().values_list("name", "room", "row", "position")
    return {name: (room, row, position) for name, room, row, position in rows}


# --- which result ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResultChoice:
    id: int
    run_id: int
    item_key: str
    status: str
    finished_at: datetime | None


def _results(cluster: Cluster) -> QuerySet[CheckResult]:
    return (
        CheckResult.objects.filter(
            run__cluster=cluster, kind__in=kinds_charted(FAMILY), scope=Scope.GROUP, status__in=FINISHED
        )
        .only("id", "run_id", "kind", "item_key", "status", "reason", "attribution", "node_set", "finished_at")
        .order_by(F("finished_at").desc(nulls_last=True), "-id")  # an error closed early may have no time
    )


def capacity_result(*, cluster: Cluster, result_id: int | None = None) -> CheckResult | None:
    """The cluster's latest finished capacity result, or the one asked for. Raises
    CheckResult.DoesNotExist when `result_id` is not a finished capacity result of this cluster."""
    if result_id is not None:
        return _results(cluster).get(pk=result_id)
    return _results(cluster).first()


def capacity_results(*, cluster: Cluster, limit: int = RESULTS_LISTED) -> list[ResultChoice]:
    """The cluster's finished capacity results, newest first."""
    rows = _results(cluster).values_list("id", "run_id", "item_key", "status", "finished_at")[:limit]
    return [ResultChoice(*row) for row in rows]


def capacity_plans() -> list[tuple[str, str]]:
    """(slug, name) of the built-in plans that run a capacity check: what the empty page suggests."""
    from portal.catalog.models import TestPlan

    plans = TestPlan.objects.filter(builtin=True, items__check_definition__kind__in=kinds_charted(FAMILY))
    return list(plans.order_by("slug").values_list("slug", "name").distinct())


# --- what the page shows ---------------------------------------------------------------------------


def limit_of(threshold: str) -> float | None:
    """The number of a threshold such as '<= 40000 W', '>= 0.8' or '>= 100966 W'; None otherwise."""
    match = re.fullmatch(r"\s*(?:>=|<=|>|<|==)\s*(-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*[^\d\s]*\s*", threshold or "")
    return float(match.group(1)) if match else None


@dataclass
class Subject:
    """One judged subject: its verdict ("" when the result recorded none) and its measurements by
    declared role ("peak", "capacity", ...)."""

    kind: str
    key: Key
    status: str = ""
    reason: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    values: dict[str, Row] = field(default_factory=dict)
    url: str = ""  # a node's history page

    def value(self, role: str) -> float | None:
        row = self.values.get(role)
        return float(row["value"]) if row is not None and row["value"] is not None else None

    def limit(self, role: str) -> float | None:
        row = self.values.get(role)
        return limit_of(row["threshold"]) if row is not None else None

    def label(self, name: str) -> str:
        found = self.labels.get(name)
        if found is None:
            found = next((str(r["labels"].get(name)) for r in self.values.values() if name in r["labels"]), "")
        return found

    @property
    def severity(self) -> int:
        return SEVERITY.get(self.status, 5)


@dataclass
class RackView:
    subject: Subject
    name: str
    place: Place | None = None

    @property
    def peak_w(self) -> float | None:
        return self.subject.value("peak")

    @property
    def budget_w(self) -> float | None:
        return self.subject.limit("peak")

    @property
    def utilisation(self) -> float | None:
        peak, budget = self.peak_w, self.budget_w
        return peak / budget if peak is not None and budget else None

    @property
    def band(self) -> str:
        """The floor plan's colour class: ok (<= 80% of budget), high, over (> budget), unknown."""
        u = self.utilisation
        if u is None:
            return "unknown"
        return "over" if u > 1 else ("high" if u > HEADROOM_FRAC else "ok")


@dataclass
class FloorRoom:
    """One room of the floor plan: its position columns and its rows, each a list of spots (the racks
    at that position: none for an empty spot, several when the model puts several there)."""

    name: str
    columns: list[str]
    rows: list[tuple[str, list[list[RackView]]]]
    placed: bool = True  # by the facility model's positions (else in name order)


@dataclass
class Curve:
    x: list[float]
    y: list[float | None]


@dataclass
class CapacityData:
    result: CheckResult
    cluster: str
    subjects: dict[str, list[Subject]]
    racks: list[RackView]
    floor: list[FloorRoom]
    placed: bool  # rack positions came from the facility model
    cluster_power: Curve | None
    rack_power: dict[str, Curve]

    def of(self, kind: str) -> list[Subject]:
        return self.subjects.get(kind, [])

    @property
    def phases(self) -> list[Subject]:
        return self.of("pdu_phase")

    @property
    def feeds(self) -> list[Subject]:
        return self.of("feed")

    @property
    def ups(self) -> list[Subject]:
        return self.of("ups")

    @property
    def loops(self) -> list[Subject]:
        return self.of("loop")

    @property
    def nodes(self) -> list[Subject]:
        """Worst first: by verdict (fail, error, warn, pass), then by peak power, highest first."""
        return sorted(self.of("node"), key=lambda s: (-s.severity, -(s.value("peak") or -1.0), s.key))

    @property
    def others(self) -> list[Subject]:
        """Verdicts of subjects the page has no section for (the soak as a whole, when it had no data)."""
        return [s for kind, found in self.subjects.items() if kind not in KEYS for s in found]


def _key(kind: str, labels: Mapping[str, Any]) -> Key:
    return tuple(str(labels.get(name, "")) for name in KEYS.get(kind, ("subject_name",)))


def _layout(result: CheckResult) -> CapacityLayout:
    return presentation_of(result.kind).capacity or CapacityLayout((), "", "")


def _subjects(result: CheckResult) -> dict[str, dict[Key, Subject]]:
    """Every subject of the result from one query of its measurements, plus the nodes' attribution."""
    found: dict[str, dict[Key, Subject]] = {}
    measures = {m.name: m for m in _layout(result).measures}
    rows = Measurement.objects.filter(result=result, name__in=[*measures, SUBJECT_VERDICT]).order_by("id")
    for row in rows.values("name", "value", "text", "unit", "threshold", "ok", "labels"):
        labels = row["labels"] or {}
        if row["name"] == SUBJECT_VERDICT:
            kind = str(labels.get("subject", ""))
            subject = found.setdefault(kind, {}).setdefault(_key(kind, labels), Subject(kind, _key(kind, labels)))
            subject.status, subject.reason, subject.labels = str(labels.get("status", "")), row["text"], dict(labels)
            continue
        measure = measures[row["name"]]
        kind, key = measure.subject, _key(measure.subject, labels)
        found.setdefault(kind, {}).setdefault(key, Subject(kind, key)).values[measure.role] = {**row, "labels": labels}
    nodes = found.setdefault("node", {})
    for host, verdict in (result.attribution or {}).items():
        subject = nodes.setdefault((host,), Subject("node", (host,)))
        subject.status, subject.reason = str(verdict.get("status", "")), str(verdict.get("reason", ""))
    return found


def _curves(result: CheckResult) -> tuple[Curve | None, dict[str, Curve]]:
    layout = _layout(result)
    cluster, racks = None, {}
    names = (layout.cluster_series, layout.rack_series)
    for s in Series.objects.filter(result=result, name__in=names).only("name", "labels", *_PACKED).order_by("id"):
        x, y = s.view()
        if s.name == layout.cluster_series:
            cluster = Curve(x, y)
        else:
            racks[str((s.labels or {}).get("rack", ""))] = Curve(x, y)
    return cluster, racks


_PACKED = ("x_packed", "y_packed", "view_packed")


def _place(value: tuple[Any, Any, Any]) -> Place | None:
    try:
        room, row, position = value
    except (TypeError, ValueError):
        return None
    return (str(room or ""), str(row or ""), "" if position is None else str(position))


def _by_name(racks: list[RackView]) -> list[RackView]:
    return sorted(racks, key=lambda r: natural(r.name))


def floor_plan(racks: list[RackView]) -> list[FloorRoom]:
    """Rooms of rows of racks by position; racks without a position last, PER_ROW a row in name
    order. When every placed rack stands on one spot (positions never entered: the facility model's
    defaults), no position is known and all are laid out by name."""
    placed = [r for r in racks if r.place is not None]
    if len(placed) > 1 and len({r.place for r in placed}) == 1:
        placed = []
    rooms: dict[str, dict[str, dict[str, list[RackView]]]] = {}
    for rack in placed:
        room, row, position = rack.place or ("", "", "")
        rooms.setdefault(room, {}).setdefault(row, {}).setdefault(position, []).append(rack)
    out = []
    for room in sorted(rooms, key=natural):
        columns = sorted({p for row in rooms[room].values() for p in row}, key=natural)
        rows = [(row, [_by_name(rooms[room][row].get(c, [])) for c in columns])
                for row in sorted(rooms[room], key=natural)]  # fmt: skip
        out.append(FloorRoom(room, columns, rows))
    unplaced = _by_name([r for r in racks if r not in placed])
    if unplaced:
        rows = [(f"{i // PER_ROW + 1}", [[r] for r in unplaced[i : i + PER_ROW]])
                for i in range(0, len(unplaced), PER_ROW)]  # fmt: skip
        columns = [str(i) for i in range(1, min(PER_ROW, len(unplaced)) + 1)]
        out.append(FloorRoom("not placed" if rooms else "", columns, rows, placed=False))
    return out


def capacity_data(*, result: CheckResult, cluster: Cluster, positions: RackPositions | None = None) -> CapacityData:
    """Everything the capacity page shows of one result."""
    found = _subjects(result)
    where = {name: place for name, value in (positions(cluster=cluster) if positions else {}).items()
             if (place := _place(value)) is not None}  # fmt: skip
    subjects = {
        kind: sorted(by_key.values(), key=lambda s: [natural(part) for part in s.key]) for kind, by_key in found.items()
    }
    racks = [RackView(s, s.key[0], where.get(s.key[0])) for s in subjects.get("rack", [])]
    seen = {r.name for r in racks}
    racks += [RackView(Subject("rack", (name,)), name, place) for name, place in where.items() if name not in seen]
    cluster_power, rack_power = _curves(result)
    floor = floor_plan(racks)
    page = reverse("history:node_detail", args=[cluster.name, "-"]).removesuffix("-/")
    for node in subjects.get("node", []):
        node.url = f"{page}{quote(node.key[0], safe='')}/"
    return CapacityData(
        result=result,
        cluster=cluster.name,
        subjects=subjects,
        racks=racks,
        floor=floor,
        placed=any(room.placed for room in floor),
        cluster_power=cluster_power,
        rack_power=rack_power,
    )
